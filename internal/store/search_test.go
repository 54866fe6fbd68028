package store

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestSearchTerms(t *testing.T) {
	tests := map[string][]string{
		"":                          nil,
		"Hello, World!":             {"hello", "world"},
		`"quoted" 'single' NEAR(x)`: {"quoted", "single", "near", "x"},
		"a-b_c:d*e":                 {"a", "b", "c", "d", "e"},
		"žluťoučký KŮŇ":             {"žluťoučký", "kůň"},
		"日本語 テキスト":                  {"日本語", "テキスト"},
		"x\xffy":                    {"x", "y"},
		"1 2 3 4 5 6 7 8 9 10":      {"1", "2", "3", "4", "5", "6", "7", "8"},
		strings.Repeat("é", 100):    {strings.Repeat("é", MaxSearchTermRune)},
	}
	for in, want := range tests {
		if diff := cmp.Diff(want, SearchTerms(in)); diff != "" {
			t.Errorf("SearchTerms(%q) (-want +got):\n%s", in, diff)
		}
	}
}

// FuzzSearchTerms holds SearchTerms to what the stores build their
// queries on: at most MaxSearchTerms non-empty words of letters, digits and
// marks, each valid UTF-8 of at most MaxSearchTermRune characters.
func FuzzSearchTerms(f *testing.F) {
	for _, s := range []string{"", `"a" OR b*`, "x\xffy", "NEAR(a b, 3)", "a & b | !c <-> d:*", strings.Repeat("w ", 20)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		terms := SearchTerms(q)
		if len(terms) > MaxSearchTerms {
			t.Fatalf("%d terms", len(terms))
		}
		for _, w := range terms {
			if w == "" || !utf8.ValidString(w) || utf8.RuneCountInString(w) > MaxSearchTermRune {
				t.Fatalf("term %q", w)
			}
			for _, r := range w {
				if !(unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)) {
					t.Fatalf("term %q has %U", w, r)
				}
			}
		}
	})
}
