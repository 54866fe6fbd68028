package anthropicsim

import (
	"encoding/json"
	"testing"

	"github.com/talkide/platform/internal/contract"
)

// A title request (its system prompt is contract.TitlePrompt) is answered
// with the message's first words, whatever directives the message holds:
// they are the user's, quoted, not the caller's.
func TestTitle(t *testing.T) {
	_, srv := newServer(t, nil)
	tests := map[string]struct {
		system any
		text   string
		want   string
	}{
		"words":              {contract.TitlePrompt, "Fix the flaky scheduler test in CI please, now", "[simulator] Fix the flaky scheduler test in"},
		"short":              {contract.TitlePrompt, "  hello\n", "[simulator] hello"},
		"directives quoted":  {contract.TitlePrompt, "[[error:529]] run [[tool:Bash {\"command\":\"ls\"}]]", "[simulator] error:529 run tool:Bash {\"command\":\"ls\"}"},
		"no words":           {contract.TitlePrompt, "[[ ]]", "[simulator] untitled"},
		"as text blocks":     {[]any{map[string]any{"type": "text", "text": contract.TitlePrompt}}, "a b", "[simulator] a b"},
		"another system":     {"be brief", "[[error:529]]", ""}, // the directive applies: an error
		"the prompt, inside": {"x " + contract.TitlePrompt, "hello", "[simulator] messages=1 you said: hello"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			b, _ := json.Marshal(map[string]any{"model": "claude-sim", "max_tokens": 64, "system": tt.system,
				"messages": []any{map[string]any{"role": "user", "content": tt.text}}})
			if tt.want == "" {
				resp, body := post(t, srv, string(b))
				if resp.StatusCode != 529 {
					t.Errorf("status %d: %s", resp.StatusCode, body)
				}
				return
			}
			m := getMessage(t, srv, string(b))
			if len(m.Content) != 1 || m.Content[0].Text != tt.want {
				t.Errorf("reply %+v, want text %q", m.Content, tt.want)
			}
		})
	}
}
