package controlplane

import (
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/store"
)

// The conversation search: GET /api/search?q=WORDS[&limit=N] finds the
// caller's own conversations (archived ones too) whose title, messages or
// replies hold every word of q, the last one as a prefix, best first
// (store.SearchConversations).

const (
	// maxSearchQuery bounds q in bytes; the store reads at most
	// store.MaxSearchTerms words of it anyway.
	maxSearchQuery     = 256
	defaultSearchLimit = 20
	maxSearchLimit     = 50
	// The snippet: up to snippetBefore bytes before the first match and
	// snippetLen in all, on one line.
	snippetBefore = 60
	snippetLen    = 200
)

// SearchResult is one conversation the search found, with a snippet of
// the text of it that matched best.
type SearchResult struct {
	Conversation ConversationView `json:"conversation"`
	// Kind is what matched: "title", "user" (a message) or "assistant"
	// (a reply).
	Kind    string `json:"kind"`
	Snippet string `json:"snippet"`
}

func (s *Server) handleSearch(w http.ResponseWriter, r *http.Request) error {
	q, limit, err := searchQuery(r)
	if err != nil {
		return err
	}
	hs, err := s.cfg.Store.SearchConversations(r.Context(), userOf(r), q, limit)
	if err != nil {
		return err
	}
	terms := store.SearchTerms(q)
	out := make([]SearchResult, 0, len(hs))
	for _, h := range hs {
		out = append(out, SearchResult{Conversation: viewOf(h.Conversation), Kind: h.Kind, Snippet: snippet(h.Body, terms)})
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"results": out})
	return nil
}

// searchQuery reads q (required, valid UTF-8, at most maxSearchQuery
// bytes) and limit (1 to maxSearchLimit); any other parameter, or one
// given twice, is refused.
func searchQuery(r *http.Request) (string, int, error) {
	bad := func(format string, args ...any) error {
		return httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, format, args...)
	}
	if len(r.URL.RawQuery) > 4*maxSearchQuery {
		return "", 0, bad("the query string is longer than %d bytes", 4*maxSearchQuery)
	}
	vals := r.URL.Query()
	for k, vs := range vals {
		if k != "q" && k != "limit" {
			return "", 0, bad("unknown query parameter %.32q (want q, limit)", k)
		}
		if len(vs) > 1 {
			return "", 0, bad("query parameter %q is given %d times", k, len(vs))
		}
	}
	q := vals.Get("q")
	switch {
	case !vals.Has("q") || strings.TrimSpace(q) == "":
		return "", 0, bad("q is required: the words to search for")
	case len(q) > maxSearchQuery:
		return "", 0, bad("q is %d bytes, more than the %d allowed", len(q), maxSearchQuery)
	case !utf8.ValidString(q):
		return "", 0, bad("q is not valid UTF-8")
	}
	limit := defaultSearchLimit
	if vals.Has("limit") {
		n, err := strconv.Atoi(vals.Get("limit"))
		if err != nil || n < 1 || n > maxSearchLimit {
			return "", 0, bad("limit must be a number from 1 to %d", maxSearchLimit)
		}
		limit = n
	}
	return q, limit, nil
}

// snippet returns the part of body around its first word that begins
// with one of terms (its start when none does: a store may match words
// that differ in accents), on one line, with "…" where it was cut.
func snippet(body string, terms []string) string {
	at := firstMatch(body, terms)
	start := max(at-snippetBefore, 0)
	for start > 0 && !utf8.RuneStart(body[start]) {
		start--
	}
	if start > 0 {
		// From the beginning of a word.
		if i := strings.IndexFunc(body[start:at], unicode.IsSpace); i >= 0 {
			start += i
		}
	}
	end := min(start+snippetLen, len(body))
	for end < len(body) && !utf8.RuneStart(body[end]) {
		end--
	}
	out := oneLine(body[start:end])
	if start > 0 {
		out = "…" + out
	}
	if end < len(body) {
		out += "…"
	}
	return out
}

// firstMatch returns the byte offset of body's first word that begins,
// folded to lower case, with one of terms; 0 when none does.
func firstMatch(body string, terms []string) int {
	inWord := false
	for i, r := range body {
		word := unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
		if word && !inWord {
			rest := strings.ToLower(body[i:min(len(body), i+4*store.MaxSearchTermRune)])
			for _, t := range terms {
				if strings.HasPrefix(rest, t) {
					return i
				}
			}
		}
		inWord = word
	}
	return 0
}
