package store

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds of SearchTerms.
const (
	MaxSearchTerms    = 8  // words of a query; the rest are ignored
	MaxSearchTermRune = 64 // characters of a word; longer ones are cut
)

// SearchTerms returns the words of a search query as both stores search
// for them: runs of letters, digits and combining marks, lower-cased,
// everything else a separator. Quotes, operators (AND, NEAR, -, *, :, &,
// |, !) and parentheses are never syntax: they separate words or are
// words like any other, so a query cannot change the shape of the search.
// At most MaxSearchTerms words of at most MaxSearchTermRune characters
// each; invalid UTF-8 separates words too.
func SearchTerms(query string) []string {
	var terms []string
	for w := range strings.FieldsFuncSeq(query, func(r rune) bool {
		return r == utf8.RuneError || !(unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r))
	}) {
		if len(terms) == MaxSearchTerms {
			break
		}
		if utf8.RuneCountInString(w) > MaxSearchTermRune {
			w = string([]rune(w)[:MaxSearchTermRune])
		}
		terms = append(terms, strings.ToLower(w))
	}
	return terms
}
