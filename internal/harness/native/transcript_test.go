package native

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/harness/historytest"
)

// Records in the Messages API's wire shape, written as literal JSON so that
// byte identity is meaningful. Some use an unusual key order or an extra
// field on purpose: a record repair keeps must come back byte for byte.
func userText(text string) string {
	return fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":%q}]}`, text)
}

func msg(role string, blocks ...string) string {
	return `{"role":"` + role + `","content":[` + strings.Join(blocks, ",") + `]}`
}

func textBlock(s string) string { return fmt.Sprintf(`{"type":"text","text":%q}`, s) }

func useBlock(id string) string {
	return `{"type":"tool_use","id":"` + id + `","name":"Bash","input":{"command":"true"}}`
}

func resultBlock(id, content string) string {
	return fmt.Sprintf(`{"type":"tool_result","tool_use_id":%q,"content":%q}`, id, content)
}

// interrupted is the tool_result repair synthesizes for an unanswered call.
func interrupted(id string) string {
	return fmt.Sprintf(`{"type":"tool_result","tool_use_id":%q,"content":%q,"is_error":true}`, id, interruptedText)
}

func raws(ss ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(ss))
	for i, s := range ss {
		out[i] = json.RawMessage(s)
	}
	return out
}

// decoded turns records into plain values for a semantic comparison.
func decoded(t *testing.T, recs []json.RawMessage) []any {
	t.Helper()
	out := make([]any, len(recs))
	for i, r := range recs {
		if err := json.Unmarshal(r, &out[i]); err != nil {
			t.Fatalf("record %d %s: %v", i, r, err)
		}
	}
	return out
}

// validateHistory fails t unless recs are a history the Messages API
// accepts (historytest.Check), every tool call answered.
func validateHistory(t *testing.T, recs []json.RawMessage) {
	t.Helper()
	if err := historytest.Check(recs, false); err != nil {
		t.Fatal(err)
	}
}

func TestRepair(t *testing.T) {
	// A valid record with an odd key order and a field wireMessage does not
	// know: a re-marshalled copy could not be byte-identical.
	oddUser := `{"content":[{"text":"hi","type":"text","cache_control":{"type":"ephemeral"}}],"role":"user"}`
	tests := map[string]struct {
		in       []string
		want     []string
		appended []string
		// sameBytes: want is literal, and got must match it byte for byte.
		sameBytes bool
	}{
		"empty": {},
		"valid transcript is unchanged": {
			sameBytes: true,
			in: []string{
				oddUser,
				msg("assistant", textBlock("running"), useBlock("A"), useBlock("B")),
				msg("user", resultBlock("A", "ok"), resultBlock("B", "ok too")),
				msg("assistant", textBlock("done")),
				userText("next"),
				msg("assistant", textBlock("fine")),
			},
			want: []string{
				oddUser,
				msg("assistant", textBlock("running"), useBlock("A"), useBlock("B")),
				msg("user", resultBlock("A", "ok"), resultBlock("B", "ok too")),
				msg("assistant", textBlock("done")),
				userText("next"),
				msg("assistant", textBlock("fine")),
			},
		},
		"dangling tool_use at the end is answered and appended": {
			in: []string{
				userText("go"),
				msg("assistant", useBlock("A"), useBlock("B")),
			},
			want: []string{
				userText("go"),
				msg("assistant", useBlock("A"), useBlock("B")),
				msg("user", interrupted("A"), interrupted("B")),
			},
			appended: []string{msg("user", interrupted("A"), interrupted("B"))},
		},
		"dangling tool_use followed by an assistant message": {
			in: []string{
				userText("go"),
				msg("assistant", useBlock("A")),
				msg("assistant", textBlock("later")),
			},
			want: []string{
				userText("go"),
				msg("assistant", useBlock("A")),
				msg("user", interrupted("A")),
				msg("assistant", textBlock("later")),
			},
		},
		"dangling tool_use followed by the next user text": {
			in: []string{
				userText("go"),
				msg("assistant", useBlock("A")),
				userText("are you there?"),
			},
			want: []string{
				userText("go"),
				msg("assistant", useBlock("A")),
				msg("user", interrupted("A"), textBlock("are you there?")),
			},
		},
		"orphaned tool_result is dropped": {
			in: []string{
				msg("user", resultBlock("X", "stray"), textBlock("hi")),
				msg("assistant", textBlock("hello")),
				msg("user", resultBlock("Y", "stray")),
			},
			want: []string{
				msg("user", textBlock("hi")),
				msg("assistant", textBlock("hello")),
			},
		},
		"tool_result answering an older assistant message is dropped": {
			in: []string{
				userText("go"),
				msg("assistant", useBlock("A")),
				msg("user", resultBlock("A", "ok")),
				msg("assistant", useBlock("B")),
				msg("user", resultBlock("A", "again")),
			},
			want: []string{
				userText("go"),
				msg("assistant", useBlock("A")),
				msg("user", resultBlock("A", "ok")),
				msg("assistant", useBlock("B")),
				msg("user", interrupted("B")),
			},
		},
		"duplicate tool_result is dropped": {
			in: []string{
				userText("go"),
				msg("assistant", useBlock("A")),
				msg("user", resultBlock("A", "first"), resultBlock("A", "second")),
				msg("assistant", textBlock("done")),
			},
			want: []string{
				userText("go"),
				msg("assistant", useBlock("A")),
				msg("user", resultBlock("A", "first")),
				msg("assistant", textBlock("done")),
			},
		},
		"partial answers get the missing result first": {
			in: []string{
				userText("go"),
				msg("assistant", useBlock("A"), useBlock("B")),
				msg("user", resultBlock("A", "ok")),
				msg("assistant", textBlock("done")),
			},
			want: []string{
				userText("go"),
				msg("assistant", useBlock("A"), useBlock("B")),
				msg("user", interrupted("B"), resultBlock("A", "ok")),
				msg("assistant", textBlock("done")),
			},
		},
		"consecutive user messages are merged keeping block bytes": {
			sameBytes: true,
			in: []string{
				oddUser,
				userText("second"),
				userText("third"),
				msg("assistant", textBlock("answer")),
			},
			want: []string{
				`{"role":"user","content":[{"text":"hi","type":"text","cache_control":{"type":"ephemeral"}},` + textBlock("second") + "," + textBlock("third") + `]}`,
				msg("assistant", textBlock("answer")),
			},
		},
		"repaired results merge with the next turn's text": {
			in: []string{
				userText("go"),
				msg("assistant", useBlock("A")),
				msg("user", interrupted("A")), // appended by an earlier repair
				userText("again"),
			},
			want: []string{
				userText("go"),
				msg("assistant", useBlock("A")),
				msg("user", interrupted("A"), textBlock("again")),
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := raws(tc.in...)
			got, appended, err := repair(in)
			if err != nil {
				t.Fatalf("repair: %v", err)
			}
			if diff := cmp.Diff(decoded(t, raws(tc.want...)), decoded(t, got)); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(decoded(t, raws(tc.appended...)), decoded(t, appended)); diff != "" {
				t.Errorf("appended (-want +got):\n%s", diff)
			}
			if tc.sameBytes {
				for i := range min(len(got), len(tc.want)) {
					if string(got[i]) != tc.want[i] {
						t.Errorf("record %d bytes:\n got %s\nwant %s", i, got[i], tc.want[i])
					}
				}
			}
			validateHistory(t, got)

			// The file plus what repair appends reads back the same, and
			// repairing a repaired history changes nothing.
			again, more, err := repair(append(raws(tc.in...), appended...))
			if err != nil || len(more) != 0 {
				t.Fatalf("repair after appending the fixes: %d more fixes, %v", len(more), err)
			}
			if diff := cmp.Diff(decoded(t, got), decoded(t, again)); diff != "" {
				t.Errorf("history after appending the fixes (-first +second):\n%s", diff)
			}
			idem, more, err := repair(append([]json.RawMessage(nil), got...))
			if err != nil || len(more) != 0 {
				t.Fatalf("repair of a repaired history: %d fixes, %v", len(more), err)
			}
			for i := range got {
				if string(idem[i]) != string(got[i]) {
					t.Errorf("repair of a repaired history changed record %d:\n got %s\nwant %s", i, idem[i], got[i])
				}
			}
		})
	}
}

func TestRepairRejectsCorruptRecord(t *testing.T) {
	for name, rec := range map[string]string{
		"not JSON":         `{"role":"user",`,
		"content not list": `{"role":"user","content":"text"}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := repair(raws(userText("ok"), rec)); err == nil {
				t.Fatal("repair accepted a corrupt record")
			}
		})
	}
}

func TestMergeUserRuns(t *testing.T) {
	tests := map[string]struct {
		in, want []string
	}{
		"nothing to merge": {
			in:   []string{userText("a"), msg("assistant", textBlock("b")), userText("c")},
			want: []string{userText("a"), msg("assistant", textBlock("b")), userText("c")},
		},
		"three users in a row": {
			in:   []string{userText("a"), userText("b"), userText("c"), msg("assistant", textBlock("d"))},
			want: []string{msg("user", textBlock("a"), textBlock("b"), textBlock("c")), msg("assistant", textBlock("d"))},
		},
		"assistants are never merged": {
			in:   []string{userText("a"), msg("assistant", textBlock("b")), msg("assistant", textBlock("c"))},
			want: []string{userText("a"), msg("assistant", textBlock("b")), msg("assistant", textBlock("c"))},
		},
		"blocks keep their bytes": {
			in: []string{
				`{"role":"user","content":[{"text":"x","type":"text"}]}`,
				`{"role":"user","content":[{"type":"tool_result","content":[{"type":"text","text":"r"}],"tool_use_id":"A","is_error":false}]}`,
			},
			want: []string{
				`{"role":"user","content":[{"text":"x","type":"text"},{"type":"tool_result","content":[{"type":"text","text":"r"}],"tool_use_id":"A","is_error":false}]}`,
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := mergeUserRuns(raws(tc.in...))
			if err != nil {
				t.Fatal(err)
			}
			var gs []string
			for _, g := range got {
				gs = append(gs, string(g))
			}
			if diff := cmp.Diff(tc.want, gs); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
