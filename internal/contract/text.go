package contract

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits of the fields that ValidateLine, ValidateTime and ValidateCount
// check.
const (
	MaxConversationTitle = 200 // characters of a conversation's title
	MaxActivity          = 500 // characters of an activity report's summary
	MaxToolName          = 200 // characters of a reported tool's name or id

	// MaxFutureSkew is how far ahead of the receiver's clock a timestamp
	// may be: the clocks of two hosts differ, by less than this.
	MaxFutureSkew = 5 * time.Minute
	// MaxReportAge is how old a report's time may be when it arrives: a
	// worker sends what its outbox held when it starts again, after an
	// outage of up to this long.
	MaxReportAge = 90 * 24 * time.Hour

	// MaxReportTokens bounds each token count of a usage report: far more
	// than any model call's, far less than what a sum of them could
	// overflow.
	MaxReportTokens = 1 << 32
	// MaxReportDurationMS bounds a tool call's reported duration: 30 days.
	MaxReportDurationMS = 30 * 24 * 3600 * 1000
)

// ValidateLine checks one line of human text — a title, a label, a
// one-line summary — and returns it with the surrounding white space
// trimmed. What is left must be 1 to max characters (Unicode code points)
// of valid UTF-8, and none of them may change how the text around it reads
// without being seen:
//
//   - control characters (NUL, ESC, CR, LF, TAB, DEL, the C1 set): a title
//     is shown in terminals, logs and lists, where they break lines or
//     run escape sequences;
//   - line and paragraph separators (U+2028, U+2029), which break lines
//     too;
//   - format characters (Unicode category Cf): the bidirectional
//     embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069),
//     which make "txt.exe" read "exe.txt", the marks (U+200E, U+200F,
//     U+061C), zero-width spaces and joiners (U+200B, U+2060, U+FEFF), soft
//     hyphens, tags, which hide text or make two different titles look
//     alike.
//
// Two format characters are part of writing and are let through where
// they do that: the zero-width joiner (U+200D) between two symbols, as in
// emoji sequences (woman, U+200D, laptop: a woman technologist), and the zero-width non-joiner (U+200C) between two
// letters of a script that needs it (Persian, the Indic scripts), not
// between Latin letters.
func ValidateLine(field, s string, max int) (string, error) {
	if !utf8.ValidString(s) {
		return "", Invalid(nil, field, "is not valid UTF-8")
	}
	s = strings.TrimSpace(s)
	n := utf8.RuneCountInString(s)
	switch {
	case n == 0:
		return "", Invalid(nil, field, "is empty")
	case n > max:
		return "", Invalid(nil, field, "is %d characters, more than the %d allowed", n, max)
	}
	var prev rune = -1
	for i, r := range s {
		if ok, why := lineRune(s, i, prev, r); !ok {
			return "", Invalid(nil, field, "must be one line of plain text: it contains %U (%s)", r, why)
		}
		prev = r
	}
	return s, nil
}

// lineRune says whether r, at byte i of s after prev (-1 at the start),
// may be in a line of text, and if not what it is.
func lineRune(s string, i int, prev, r rune) (bool, string) {
	switch {
	case r == '\n' || r == '\r' || r == '\u2028' || r == '\u2029' || r == '\u0085':
		return false, "a line break"
	case unicode.IsControl(r):
		return false, "a control character"
	case !unicode.Is(unicode.Cf, r):
		return true, ""
	}
	next, size := utf8.DecodeRuneInString(s[i+utf8.RuneLen(r):])
	if size == 0 {
		next = -1 // the end (not U+FFFD, which is a symbol)
	}
	switch r {
	case '\u200d': // zero-width joiner
		if joinsSymbols(prev, next) {
			return true, ""
		}
	case '\u200c': // zero-width non-joiner
		if joinsScript(prev) && joinsScript(next) {
			return true, ""
		}
	}
	switch {
	case r >= '\u202a' && r <= '\u202e' || r >= '\u2066' && r <= '\u2069':
		return false, "a bidirectional override"
	case r == '\u200b' || r == '\u200c' || r == '\u200d' || r == '\u2060' || r == '\ufeff':
		return false, "a zero-width character"
	}
	return false, "an invisible format character"
}

// joinsSymbols reports whether a zero-width joiner between prev and next
// builds an emoji sequence: a symbol (or the variation selector or skin
// tone that ends one) before it, a symbol after it.
func joinsSymbols(prev, next rune) bool {
	before := unicode.Is(unicode.So, prev) || prev == '\ufe0f' || prev >= 0x1f3fb && prev <= 0x1f3ff
	return before && unicode.Is(unicode.So, next)
}

// joinsScript reports whether r is a letter or mark of a script in which
// the zero-width non-joiner is spelling: any but Latin (and the common
// and inherited characters every script shares).
func joinsScript(r rune) bool {
	if !unicode.IsLetter(r) && !unicode.IsMark(r) {
		return false
	}
	return !unicode.In(r, unicode.Latin, unicode.Common)
}

// ValidateIdempotencyKey checks an idempotency key: 1 to MaxIdempotencyKey
// bytes of valid UTF-8 without control characters. Keys are stored and
// compared, never shown, so any other character may be in one; a NUL would
// make PostgreSQL refuse the whole write it is in.
func ValidateIdempotencyKey(field, key string) error {
	switch {
	case key == "" || len(key) > MaxIdempotencyKey:
		return Invalid(nil, field, "must be 1-%d bytes", MaxIdempotencyKey)
	case !utf8.ValidString(key):
		return Invalid(nil, field, "is not valid UTF-8")
	case strings.ContainsFunc(key, unicode.IsControl):
		return Invalid(nil, field, "contains a control character")
	}
	return nil
}

// ValidateTime checks a timestamp that a client says something happened
// at: not the zero time, not ahead of now by more than MaxFutureSkew (no
// 9999-12-31, which would sort after everything and never age out), and
// not older than maxAge.
func ValidateTime(field string, t, now time.Time, maxAge time.Duration) error {
	switch {
	case t.IsZero():
		return Invalid(nil, field, "is missing")
	case t.After(now.Add(MaxFutureSkew)):
		return Invalid(nil, field, "is %s, in the future (now is %s)", t.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case t.Before(now.Add(-maxAge)):
		return Invalid(nil, field, "is %s, more than %s ago", t.UTC().Format(time.RFC3339), humanDuration(maxAge))
	}
	return nil
}

// ValidateCount checks a count a client reports (tokens, milliseconds):
// 0 to max.
func ValidateCount(field string, n, max int64) error {
	switch {
	case n < 0:
		return Invalid(nil, field, "is %d, below zero", n)
	case n > max:
		return Invalid(nil, field, "is %d, more than the %d allowed", n, max)
	}
	return nil
}

func humanDuration(d time.Duration) string {
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return d.String()
}
