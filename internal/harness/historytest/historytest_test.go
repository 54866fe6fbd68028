package historytest

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	user := `{"role":"user","content":[{"type":"text","text":"hi"}]}`
	use := `{"role":"assistant","content":[{"type":"text","text":"running"},{"type":"tool_use","id":"A","name":"Bash","input":{}}]}`
	result := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"A","content":"ok"}]}`
	answer := `{"role":"assistant","content":[{"type":"text","text":"done"}]}`
	tests := map[string]struct {
		recs    []string
		openEnd bool
		want    string // substring of the error; empty: valid
	}{
		"tool round trip":                {recs: []string{user, use, result, answer}},
		"user runs merge":                {recs: []string{user, user, answer}},
		"results merge with later text":  {recs: []string{user, use, result, user, answer}},
		"open end allowed after a crash": {recs: []string{user, use}, openEnd: true},
		"open end":                       {recs: []string{user, use}, want: "unanswered"},
		"starts with assistant":          {recs: []string{answer}, want: `role "assistant", want "user"`},
		"two assistants":                 {recs: []string{user, answer, answer}, want: "roles alternate"},
		"unanswered mid-file":            {recs: []string{user, use, user, answer}, openEnd: true, want: `does not answer tool_use "A"`},
		"orphan result":                  {recs: []string{user, answer, result}, want: "answers no tool_use"},
		"result after text":              {recs: []string{user, use, `{"role":"user","content":[{"type":"text","text":"x"},{"type":"tool_result","tool_use_id":"A"}]}`}, want: "after other content"},
		"empty text":                     {recs: []string{`{"role":"user","content":[{"type":"text","text":" "}]}`}, want: "empty text block"},
		"empty message":                  {recs: []string{`{"role":"user","content":[]}`}, want: "no content"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var recs []json.RawMessage
			for _, r := range tc.recs {
				recs = append(recs, json.RawMessage(r))
			}
			err := Check(recs, tc.openEnd)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid transcript refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
