package chatclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
)

func delta(text string) contract.Event {
	return contract.Event{Kind: contract.KindTextDelta, Text: text}
}

func message(text string) contract.Event {
	return contract.Event{Kind: contract.KindMessage, Text: text}
}

func toolStarted(id, name, input string) contract.Event {
	return contract.Event{Kind: contract.KindToolStarted, Tool: &contract.ToolEvent{ID: id, Name: name, Input: json.RawMessage(input)}}
}

func toolOutput(id, out string) contract.Event {
	return contract.Event{Kind: contract.KindToolOutput, Tool: &contract.ToolEvent{ID: id, Output: out}}
}

func toolFinished(id, name, out string, isErr bool) contract.Event {
	return contract.Event{Kind: contract.KindToolFinished, Tool: &contract.ToolEvent{ID: id, Name: name, Output: out, IsError: isErr}}
}

var (
	finished = contract.Event{Kind: contract.KindTurnFinished, Finish: &contract.TurnFinish{StopReason: "end_turn", ModelCalls: 2, DurationMS: 1234}}
	usage    = contract.Event{Kind: contract.KindUsage, Usage: &contract.Usage{Model: "claude-x", InputTokens: 10, OutputTokens: 5, CacheReadInputTokens: 3}}
)

func numberedLines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

func TestRenderer(t *testing.T) {
	tests := map[string]struct {
		verbose, color, showUser bool
		evs                      []contract.Event
		want                     string
	}{
		"streamed text": {
			evs:  []contract.Event{delta("Hel"), delta("lo"), delta(" world"), message("Hello world"), finished},
			want: "Hello world\n\n",
		},
		"message without deltas": {
			evs:  []contract.Event{message("Hi\nthere\n"), finished},
			want: "Hi\nthere\n\n",
		},
		"text blocks on their own lines": {
			evs:  []contract.Event{delta("one"), {Kind: contract.KindTextDelta, Index: 2, Text: "two"}, message("onetwo")},
			want: "one\ntwo\n",
		},
		"bash call": {
			evs: []contract.Event{
				delta("Let me look."), message("Let me look."),
				toolStarted("tu1", "Bash", `{"command":"ls -la","description":"list"}`),
				toolFinished("tu1", "Bash", "a\nb\n", false),
				delta("Done."), message("Done."), finished,
			},
			want: "Let me look.\n⏺ Bash(ls -la)\n  ⎿ a\n    b\nDone.\n\n",
		},
		"file tool and generic tool": {
			evs: []contract.Event{
				toolStarted("tu1", "Read", `{"file_path":"/w/main.go","limit":10}`),
				toolFinished("tu1", "Read", "", false),
				toolStarted("tu2", "Grep", `{ "pattern": "func main", "path": "." }`),
				toolFinished("tu2", "Grep", "main.go:3", false),
				toolStarted("tu3", "Think", `{}`),
				toolFinished("tu3", "Think", "ok", false),
			},
			want: "⏺ Read(/w/main.go)\n  ⎿ (no output)\n" +
				"⏺ Grep({\"pattern\":\"func main\",\"path\":\".\"})\n  ⎿ main.go:3\n" +
				"⏺ Think\n  ⎿ ok\n",
		},
		"long input summaries": {
			evs: []contract.Event{
				toolStarted("tu1", "Bash", `{"command":"cd /w &&\nmake test"}`),
				toolStarted("tu2", "Fetch", `{"url":"https://example.com/`+strings.Repeat("a", 100)+`"}`),
			},
			want: "⏺ Bash(cd /w && …)\n" +
				"⏺ Fetch({\"url\":\"https://example.com/" + strings.Repeat("a", 100-len(`{"url":"https://example.com/`)-1) + "…)\n",
		},
		"long and failing result": {
			evs: []contract.Event{
				toolStarted("tu1", "Bash", `{"command":"make"}`),
				{Kind: contract.KindToolFinished, Tool: &contract.ToolEvent{ID: "tu1", Name: "Bash", Output: numberedLines(13), IsError: true, Truncated: true}},
			},
			want: "⏺ Bash(make)\n  ⎿ ✗ line 1\n" +
				"    line 2\n    line 3\n    line 4\n    line 5\n    line 6\n    line 7\n    line 8\n    line 9\n    line 10\n" +
				"    … +3 lines\n    (output truncated)\n",
		},
		"parallel tools repeat the header": {
			evs: []contract.Event{
				toolStarted("a", "Bash", `{"command":"sleep 1"}`),
				toolStarted("b", "Read", `{"file_path":"x"}`),
				toolFinished("a", "Bash", "", false),
				toolFinished("b", "Read", "hi", false),
				toolFinished("c", "Write", "wrote", false),
			},
			want: "⏺ Bash(sleep 1)\n⏺ Read(x)\n⏺ Bash(sleep 1)\n  ⎿ (no output)\n⏺ Read(x)\n  ⎿ hi\n⏺ Write\n  ⎿ wrote\n",
		},
		"tool output chunks hidden": {
			evs: []contract.Event{
				toolStarted("a", "Bash", `{"command":"make"}`),
				toolOutput("a", "building\n"),
				toolFinished("a", "Bash", "building\nok\n", false),
			},
			want: "⏺ Bash(make)\n  ⎿ building\n    ok\n",
		},
		"verbose": {
			verbose: true,
			evs: []contract.Event{
				{Kind: contract.KindSessionResumed, Session: &contract.SessionEvent{Harness: "native", Messages: 4}},
				{Kind: contract.KindTurnStarted, TurnID: "t_1"},
				toolStarted("a", "Bash", `{"command":"make"}`),
				toolOutput("a", "build"),
				toolOutput("a", "ing\n"),
				toolFinished("a", "Bash", "building\n", false),
				usage, delta("ok"), message("ok"), finished,
				{Kind: "future.kind"},
			},
			want: "· session resumed (harness native, 4 messages restored)\n· turn t_1 started\n" +
				"⏺ Bash(make)\nbuilding\n  ⎿ building\n" +
				"· usage claude-x: 10 in, 5 out, 3 cache read, 0 cache write\n" +
				"ok\n· turn finished: end_turn, 2 model calls, 1.2s\n\n· future.kind event\n",
		},
		"quiet by default": {
			evs: []contract.Event{
				{Kind: contract.KindSessionCreated, Session: &contract.SessionEvent{Harness: "native"}},
				{Kind: contract.KindTurnStarted}, usage, {Kind: "future.kind"},
				{Kind: contract.KindUserMessage, Text: "hi"},
			},
			want: "",
		},
		"failed turn mid-line": {
			evs:  []contract.Event{delta("Work"), {Kind: contract.KindTurnFailed, Failure: &contract.TurnFailure{Code: "interrupted", Message: "interrupted by user"}}},
			want: "Work\n✗ turn failed (interrupted): interrupted by user\n\n",
		},
		"notice and replayed user messages": {
			showUser: true,
			evs: []contract.Event{
				{Kind: contract.KindNotice, Text: "model simulator in use"},
				{Kind: contract.KindUserMessage, Text: "fix it\nplease"},
				delta("Sure"),
				{Kind: contract.KindNotice, Text: "worker restarting"},
			},
			want: "! model simulator in use\n> fix it\n  please\nSure\n! worker restarting\n",
		},
		"control characters stripped": {
			evs: []contract.Event{
				delta("\x1b]0;pwned\x07red\x1b[31m\r\n"),
				toolStarted("a", "Bash", "{\"command\":\"echo \\u001b[2J\"}"),
				toolFinished("a", "Bash", "\x1b[1Aup\u009bx\tok", false),
			},
			want: "]0;pwnedred[31m\n⏺ Bash(echo [2J)\n  ⎿ [1Aupx\tok\n",
		},
		"color": {
			color: true,
			evs: []contract.Event{
				toolStarted("a", "Bash", `{"command":"false"}`),
				toolFinished("a", "Bash", "exit 1", true),
				{Kind: contract.KindTurnFailed, Failure: &contract.TurnFailure{Code: "model_error", Message: "boom"}},
			},
			want: "\x1b[1m⏺ Bash\x1b[0m(false)\n  ⎿ \x1b[31m✗ exit 1\x1b[0m\n\x1b[31m✗ turn failed (model_error): boom\x1b[0m\n\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			r := &Renderer{W: &out, Verbose: tc.verbose, Color: tc.color, ShowUser: tc.showUser}
			for _, ev := range tc.evs {
				r.Render(ev)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRendererNilWriter(t *testing.T) {
	var r Renderer
	r.Render(delta("x"))
	r.Render(finished)
}

// FuzzRender feeds arbitrary events to the renderer: it must not panic and,
// without Color, must never emit an escape or other control character.
func FuzzRender(f *testing.F) {
	f.Add([]byte(`{"kind":"text.delta","text":"hi \u001b[31m"}`))
	f.Add([]byte(`{"kind":"tool.started","tool":{"id":"a","name":"Bash","input":{"command":"ls\nx"}}}`))
	f.Add([]byte(`{"kind":"tool.finished","tool":{"id":"a","name":"Bash","output":"\u009b\r\nx","is_error":true}}`))
	f.Add([]byte(`{"kind":"tool.started","tool":{"id":"a","name":"X","input":"\u00e9\u00e9"}}`))
	f.Add([]byte(`{"kind":"turn.failed","failure":{"code":"\u0007","message":"m\nn"}}`))
	f.Add([]byte(`{"kind":"usage","usage":{"model":"m"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var ev contract.Event
		if json.Unmarshal(data, &ev) != nil {
			return
		}
		var out bytes.Buffer
		r := &Renderer{W: &out, Verbose: true, ShowUser: true}
		r.Render(ev)
		r.Render(delta("x"))
		r.Render(ev)
		for _, c := range out.String() {
			if isControl(c) {
				t.Fatalf("control character %U in output %q", c, out.String())
			}
		}
	})
}
