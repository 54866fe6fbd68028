package anthropicsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits on directives.
const (
	maxToolDirectives = 64
	maxToolNameLen    = 128
	maxSleep          = 60 * time.Second
)

// directives is what parseDirectives found in a user text.
type directives struct {
	Tools []toolCall // [[tool:NAME {json}]], in order
	// Lead is the text before the first tool directive, with any other
	// directives removed and surrounding space trimmed.
	Lead     string
	Sleep    time.Duration // [[sleep:MS]]; the last one wins
	HasSleep bool
	Error    int // [[error:STATUS]]; 0 when absent; the last one wins
	// Malformed, when not empty, says why a directive could not be parsed.
	// Parsing stops there and the other fields hold what came before.
	Malformed string
}

// toolCall is one [[tool:NAME {json}]] directive.
type toolCall struct {
	Name  string
	Input json.RawMessage // a compacted JSON object; {} when omitted
}

// parseDirectives scans text for [[tool:NAME {json}]], [[sleep:MS]] and
// [[error:STATUS]]. Any other "[[" is plain text. A directive that starts
// with one of those three prefixes but is not well formed stops the scan
// and is reported in Malformed: a test author sees the mistake instead of an
// echo. The work is linear in len(text): each directive is scanned once and
// the scan ends at the first malformed one.
func parseDirectives(text string) directives {
	var d directives
	var lead strings.Builder
	leadFrom, leadDone := 0, false
	for i := 0; ; {
		j := strings.Index(text[i:], "[[")
		if j < 0 {
			break
		}
		p := i + j
		rest := text[p+2:]
		var end int
		var err string
		isTool := false
		switch {
		case strings.HasPrefix(rest, "tool:"):
			isTool = true
			var tc toolCall
			tc, end, err = parseToolDirective(text, p+len("[[tool:"))
			if err == "" {
				if len(d.Tools) == maxToolDirectives {
					err = fmt.Sprintf("more than %d tool directives", maxToolDirectives)
				} else {
					d.Tools = append(d.Tools, tc)
				}
			}
		case strings.HasPrefix(rest, "sleep:"):
			var ms int
			ms, end, err = parseNumberDirective(text, p+len("[[sleep:"), 0, int(maxSleep/time.Millisecond))
			if err == "" {
				d.Sleep, d.HasSleep = time.Duration(ms)*time.Millisecond, true
			}
		case strings.HasPrefix(rest, "error:"):
			d.Error, end, err = parseNumberDirective(text, p+len("[[error:"), 400, 599)
		default:
			i = p + 1
			continue
		}
		if err != "" {
			d.Malformed = fmt.Sprintf("malformed directive at byte %d (%s): %s", p, snippet(text[p:], 40), err)
			return d
		}
		if !leadDone {
			lead.WriteString(text[leadFrom:p])
			leadFrom = end
			leadDone = isTool
		}
		i = end
	}
	if leadDone {
		d.Lead = strings.TrimSpace(lead.String())
	}
	return d
}

// parseToolDirective parses NAME, optional space, an optional JSON object and
// "]]" starting at k. It returns the index just past "]]".
func parseToolDirective(text string, k int) (toolCall, int, string) {
	start := k
	for k < len(text) && isToolNameByte(text[k]) {
		k++
	}
	switch {
	case k == start:
		return toolCall{}, 0, "want [[tool:NAME {json}]], tool name missing"
	case k-start > maxToolNameLen:
		return toolCall{}, 0, fmt.Sprintf("tool name longer than %d bytes", maxToolNameLen)
	}
	tc := toolCall{Name: text[start:k], Input: json.RawMessage("{}")}
	k = skipSpace(text, k)
	if k < len(text) && text[k] == '{' {
		end := scanObject(text, k)
		if end < 0 {
			return toolCall{}, 0, "tool input: JSON object is not closed"
		}
		var b bytes.Buffer
		if err := json.Compact(&b, []byte(text[k:end])); err != nil {
			return toolCall{}, 0, "tool input is not valid JSON: " + err.Error()
		}
		tc.Input = b.Bytes()
		k = skipSpace(text, end)
	}
	if !strings.HasPrefix(text[k:], "]]") {
		return toolCall{}, 0, "want [[tool:NAME {json}]], missing ]] after the tool input"
	}
	return tc, k + 2, ""
}

// parseNumberDirective parses a decimal number in [lo, hi] followed by "]]".
func parseNumberDirective(text string, k, lo, hi int) (int, int, string) {
	start := k
	for k < len(text) && k-start <= 6 && text[k] >= '0' && text[k] <= '9' {
		k++
	}
	n, err := strconv.Atoi(text[start:k])
	if err != nil || !strings.HasPrefix(text[k:], "]]") {
		return 0, 0, "want a decimal number followed by ]]"
	}
	if n < lo || n > hi {
		return 0, 0, fmt.Sprintf("%d is outside %d..%d", n, lo, hi)
	}
	return n, k + 2, ""
}

// scanObject returns the index just past the JSON object that starts at
// text[start] == '{', or -1 when it never closes. It balances braces and
// brackets outside strings; validity is checked by the caller.
func scanObject(text string, start int) int {
	depth, inString, escaped := 0, false, false
	for i := start; i < len(text); i++ {
		c := text[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth <= 0 {
				return i + 1
			}
		}
	}
	return -1
}

// isToolNameByte reports whether c may appear in a tool name. The API allows
// [a-zA-Z0-9_-]; dots are tolerated too.
func isToolNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

func skipSpace(text string, k int) int {
	for k < len(text) && (text[k] == ' ' || text[k] == '\t' || text[k] == '\n' || text[k] == '\r') {
		k++
	}
	return k
}

// snippet returns at most n bytes of s, cut at a rune boundary, with "…"
// when cut.
func snippet(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
