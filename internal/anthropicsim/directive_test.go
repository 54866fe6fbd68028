package anthropicsim

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseDirectives(t *testing.T) {
	tests := map[string]struct {
		text string
		want directives
	}{
		"none": {"plain [[text]] [not] a [[directive", directives{}},
		"tool with nested JSON": {
			`[[tool:get_weather {"q": "a]]b", "n": {"x": [1, {"y": "}"}]}, "e": "\"]]"}]]`,
			directives{Tools: []toolCall{{"get_weather", json.RawMessage(`{"q":"a]]b","n":{"x":[1,{"y":"}"}]},"e":"\"]]"}`)}}},
		},
		"tool without input": {"[[tool:mcp__srv__do-it.v2]]", directives{Tools: []toolCall{{"mcp__srv__do-it.v2", json.RawMessage(`{}`)}}}},
		"space around input": {"[[tool:t \n {\"a\":1} \n]]", directives{Tools: []toolCall{{"t", json.RawMessage(`{"a":1}`)}}}},
		"lead text, others removed": {
			"  hi [[sleep:5]] there\n[[tool:a {}]] mid [[tool:b {}]] [[error:529]]",
			directives{
				Tools: []toolCall{{"a", json.RawMessage(`{}`)}, {"b", json.RawMessage(`{}`)}},
				Lead:  "hi  there", Sleep: 5 * time.Millisecond, HasSleep: true, Error: 529,
			},
		},
		"sleep bounds":     {"[[sleep:0]][[sleep:60000]]", directives{Sleep: time.Minute, HasSleep: true}},
		"triple bracket":   {"[[[tool:t]]]", directives{Tools: []toolCall{{"t", json.RawMessage(`{}`)}}, Lead: "["}},
		"error last wins":  {"[[error:500]] [[error:429]]", directives{Error: 429}},
		"malformed sleep":  {"[[sleep:60001]]", directives{Malformed: "malformed directive at byte 0 ([[sleep:60001]]): 60001 is outside 0..60000"}},
		"malformed error":  {"x [[error:abc]]", directives{Malformed: "malformed directive at byte 2 ([[error:abc]]): want a decimal number followed by ]]"}},
		"unclosed object":  {`[[tool:t {"a": "}]]`, directives{Malformed: `malformed directive at byte 0 ([[tool:t {"a": "}]]): tool input: JSON object is not closed`}},
		"no name":          {"[[tool: {}]]", directives{Malformed: "malformed directive at byte 0 ([[tool: {}]]): want [[tool:NAME {json}]], tool name missing"}},
		"junk after name":  {"[[tool:t junk]]", directives{Malformed: "malformed directive at byte 0 ([[tool:t junk]]): want [[tool:NAME {json}]], missing ]] after the tool input"}},
		"array input":      {"[[tool:t [1]]]", directives{Malformed: "malformed directive at byte 0 ([[tool:t [1]]]): want [[tool:NAME {json}]], missing ]] after the tool input"}},
		"stops at the bad": {"[[tool:a]] [[tool:b {]] [[tool:c]]", directives{Tools: []toolCall{{"a", json.RawMessage(`{}`)}}, Malformed: "malformed directive at byte 11 ([[tool:b {]] [[tool:c]]): tool input is not valid JSON: invalid character ']' looking for beginning of object key string"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got := parseDirectives(tt.text)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseDirectives(%q) (-want +got):\n%s", tt.text, diff)
			}
		})
	}
}

func TestParseDirectivesLimits(t *testing.T) {
	d := parseDirectives(strings.Repeat("[[tool:t]]", maxToolDirectives))
	if len(d.Tools) != maxToolDirectives || d.Malformed != "" {
		t.Errorf("%d tools, malformed %q", len(d.Tools), d.Malformed)
	}
	d = parseDirectives(strings.Repeat("[[tool:t]]", maxToolDirectives+1))
	if !strings.Contains(d.Malformed, "more than 64") {
		t.Errorf("malformed %q", d.Malformed)
	}
	d = parseDirectives("[[tool:" + strings.Repeat("n", maxToolNameLen+1) + "]]")
	if !strings.Contains(d.Malformed, "longer than") {
		t.Errorf("malformed %q", d.Malformed)
	}
}

// TestParseDirectivesLinear guards against quadratic scanning of hostile
// texts, such as many nested unclosed objects.
func TestParseDirectivesLinear(t *testing.T) {
	texts := []string{
		strings.Repeat("[[tool:a {", 200_000),
		strings.Repeat("[[tool:a {", 100_000) + strings.Repeat("}", 100_000),
		strings.Repeat("[[sleep:1", 200_000),
		strings.Repeat("[[", 1_000_000),
	}
	for _, text := range texts {
		start := time.Now()
		parseDirectives(text)
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("parsing %d bytes took %v", len(text), el)
		}
	}
}

func FuzzDirectives(f *testing.F) {
	for _, s := range []string{
		"", "hello", "[[tool:t]]", `[[tool:get_weather {"city":"Paris ]]"}]]`, "[[sleep:100]] [[error:429]]",
		`pre [[tool:a {"x":[1,{"y":"}"}]}]] mid [[tool:b]]`, "[[tool:t {", `[[tool:t {"a":"\"}]]`, "[[[[tool:", "[[error:5999]]",
		"[[tool:é]]", "[[tool:t {\"\xff\":1}]]",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		d := parseDirectives(text)
		if len(d.Tools) > maxToolDirectives {
			t.Errorf("%d tools", len(d.Tools))
		}
		for _, tc := range d.Tools {
			if tc.Name == "" || len(tc.Name) > maxToolNameLen {
				t.Errorf("tool name %q", tc.Name)
			}
			var obj map[string]any
			if err := json.Unmarshal(tc.Input, &obj); err != nil || obj == nil {
				t.Errorf("tool input %q is not a JSON object: %v", tc.Input, err)
			}
		}
		if d.Sleep < 0 || d.Sleep > maxSleep || (!d.HasSleep && d.Sleep != 0) {
			t.Errorf("sleep %v (has %v)", d.Sleep, d.HasSleep)
		}
		if d.Error != 0 && (d.Error < 400 || d.Error > 599) {
			t.Errorf("error %d", d.Error)
		}
		if d.Lead != "" && (len(d.Tools) == 0 || !strings.Contains(text, d.Lead[:1])) {
			t.Errorf("lead %q without tools", d.Lead)
		}
		// A text without "[[" has no directives.
		if !strings.Contains(text, "[[") && (len(d.Tools) > 0 || d.HasSleep || d.Error != 0 || d.Malformed != "") {
			t.Errorf("directives found in %q", text)
		}
		// Re-rendering the tool calls parses back to the same calls.
		if d.Malformed == "" && len(d.Tools) > 0 {
			var b strings.Builder
			for _, tc := range d.Tools {
				b.WriteString("[[tool:" + tc.Name + " " + string(tc.Input) + "]] ")
			}
			again := parseDirectives(b.String())
			if diff := cmp.Diff(d.Tools, again.Tools); diff != "" || again.Malformed != "" {
				t.Errorf("round trip of %q: %s %s", b.String(), diff, again.Malformed)
			}
		}
	})
}
