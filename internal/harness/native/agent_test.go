package native

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/tools"
)

func TestTaskRunsASubAgent(t *testing.T) {
	f := newFixture(t, nil, nil)
	sessionDir := t.TempDir()
	s := &sink{}
	turn := f.turn(`delegate [[tool:Task {"description":"write a file","prompt":"please [[tool:Write {\"file_path\":\"sub.txt\",\"content\":\"from the sub-agent\"}]]"}]]`, s)
	turn.SessionDir = sessionDir
	ctx := t.Context()
	res, err := f.h.RunTurn(ctx, turn)
	if err != nil {
		t.Fatalf("RunTurn: %v", err)
	}
	if res.ModelCalls != 2 {
		t.Errorf("main agent made %d model calls, want 2", res.ModelCalls)
	}
	b, err := os.ReadFile(filepath.Join(f.workspace, "sub.txt"))
	if err != nil || string(b) != "from the sub-agent" {
		t.Fatalf("the sub-agent's file: %q, %v", b, err)
	}
	var task *contract.ToolEvent
	var streamed strings.Builder
	taskID := ""
	var nested []string // the sub-agent's events: kind and tool
	for _, ev := range s.Events() {
		if ev.Kind == contract.KindToolStarted && ev.Tool.Name == taskToolName {
			taskID = ev.Tool.ID
		}
		if ev.Kind == contract.KindToolFinished && ev.Tool.Name == taskToolName {
			task = ev.Tool
		}
		if ev.Kind == contract.KindToolOutput && ev.Tool.Name == taskToolName {
			streamed.WriteString(ev.Tool.Output)
		}
		if ev.ParentToolUseID == "" {
			if ev.Tool != nil && ev.Tool.Name == "Write" {
				t.Errorf("the sub-agent's %s came without its Task call as parent", ev.Kind)
			}
			continue
		}
		if taskID == "" || ev.ParentToolUseID != taskID {
			t.Errorf("%s names parent %q, want the Task call %q", ev.Kind, ev.ParentToolUseID, taskID)
		}
		if task != nil {
			t.Errorf("%s of the sub-agent after its Task call finished", ev.Kind)
		}
		if err := ev.ValidateParent(); err != nil && !strings.Contains(err.Error(), "outside a turn") {
			t.Errorf("%s: %v", ev.Kind, err)
		}
		name := ev.Kind
		if ev.Tool != nil {
			name += " " + ev.Tool.Name
		}
		nested = append(nested, name)
	}
	if task == nil || task.IsError || !strings.Contains(task.Output, "tool results") {
		t.Fatalf("Task result: %+v", task)
	}
	// The sub-agent's two model calls: a reply with the Write call, then
	// its report.
	wantNested := []string{
		"text.delta", "assistant.message", "usage", "tool.started Write", "tool.finished Write",
		"text.delta", "assistant.message", "usage",
	}
	if diff := cmp.Diff(wantNested, dedupDeltas(nested)); diff != "" {
		t.Errorf("the sub-agent's events (-want +got):\n%s", diff)
	}
	if !strings.Contains(streamed.String(), "⏺ Write") {
		t.Errorf("the sub-agent's work was not streamed as the Task output: %q", streamed.String())
	}
	// Its own transcript is kept under the session directory.
	matches, _ := filepath.Glob(filepath.Join(sessionDir, "subagents", "*.jsonl"))
	if len(matches) != 1 {
		t.Fatalf("sub-agent transcripts: %v", matches)
	}
	data, _ := os.ReadFile(matches[0])
	if lines := strings.Count(string(data), "\n"); lines != 4 {
		t.Errorf("sub-agent transcript has %d records, want 4 (prompt, tool_use, tool_result, report)", lines)
	}
	// The sub-agent was not offered Task (no recursion).
	for _, body := range f.sim.Requests() {
		if strings.Contains(string(body), "please [[tool:Write") && !strings.Contains(string(body), "delegate") {
			if strings.Contains(string(body), `"name":"Task"`) {
				t.Error("the sub-agent was offered the Task tool")
			}
		}
	}
}

// dedupDeltas folds runs of text.delta into one, since how many deltas a
// reply streams in is the simulator's business.
func dedupDeltas(kinds []string) []string {
	var out []string
	for _, k := range kinds {
		if k == contract.KindTextDelta && len(out) > 0 && out[len(out)-1] == k {
			continue
		}
		out = append(out, k)
	}
	return out
}

// Every model call of a turn, a sub-agent's included, names the turn's
// conversation in X-Talkide-Conversation, once: the minting transport mints
// for it and the gateway checks the token against it.
func TestModelCallsNameTheirConversation(t *testing.T) {
	for _, conv := range []string{"conv-1", "another_conversation-2"} {
		t.Run(conv, func(t *testing.T) {
			var mu sync.Mutex
			var seen [][]string
			f := newFixture(t, nil, func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					seen = append(seen, r.Header.Values(contract.ConversationHeader))
					mu.Unlock()
					next.ServeHTTP(w, r)
				})
			})
			turn := f.turn(`delegate [[tool:Task {"description":"look","prompt":"please [[tool:Bash {\"command\":\"true\"}]]"}]]`, &sink{})
			turn.ConversationID = conv
			turn.SessionDir = t.TempDir()
			if _, err := f.h.RunTurn(t.Context(), turn); err != nil {
				t.Fatalf("RunTurn: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) < 4 {
				t.Fatalf("%d model calls, want the main agent's two and the sub-agent's two", len(seen))
			}
			for i, v := range seen {
				if diff := cmp.Diff([]string{conv}, v); diff != "" {
					t.Errorf("call %d: %s (-want +got):\n%s", i, contract.ConversationHeader, diff)
				}
			}
		})
	}
}

func TestReadOnlyToolsRunConcurrently(t *testing.T) {
	f := newFixture(t, nil, nil)
	os.MkdirAll(f.workspace, 0o755)
	os.WriteFile(filepath.Join(f.workspace, "a.txt"), []byte("alpha"), 0o644)
	os.WriteFile(filepath.Join(f.workspace, "b.txt"), []byte("beta"), 0o644)
	s := &sink{}
	_, err := f.run(t, `[[tool:Read {"file_path":"a.txt"}]] [[tool:Read {"file_path":"b.txt"}]] [[tool:Write {"file_path":"c.txt","content":"c"}]]`, s)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, ev := range s.Events() {
		if ev.Kind == contract.KindToolStarted || ev.Kind == contract.KindToolFinished {
			order = append(order, ev.Kind+":"+ev.Tool.Name)
		}
	}
	// Both reads start before either finishes; the write runs alone after.
	if len(order) != 6 || order[0] != "tool.started:Read" || order[1] != "tool.started:Read" ||
		order[4] != "tool.started:Write" || order[5] != "tool.finished:Write" {
		t.Fatalf("tool event order %v", order)
	}
	// Results come back in the calls' order.
	msgs := f.lastRequestMessages(t)
	var last wireMessage
	json.Unmarshal(msgs[len(msgs)-1], &last)
	var contents []string
	for _, b := range last.Content {
		var text string
		json.Unmarshal(b.Content, &text)
		contents = append(contents, text)
	}
	if len(contents) != 3 || !strings.Contains(contents[0], "alpha") || !strings.Contains(contents[1], "beta") {
		t.Fatalf("tool results out of order: %q", contents)
	}
}

func TestProjectInstructionsAndCacheBreakpoints(t *testing.T) {
	f := newFixture(t, nil, nil)
	os.MkdirAll(f.workspace, 0o755)
	os.WriteFile(filepath.Join(f.workspace, "CLAUDE.md"), []byte("Always run make check."), 0o644)
	os.WriteFile(filepath.Join(f.workspace, "AGENTS.md"), []byte("Use tabs."), 0o644)
	if _, err := f.run(t, "hi", &sink{}); err != nil {
		t.Fatal(err)
	}
	reqs := f.sim.Requests()
	var body struct {
		System []struct {
			Text         string          `json:"text"`
			CacheControl json.RawMessage `json:"cache_control"`
		} `json:"system"`
		Tools []struct {
			Name         string          `json:"name"`
			CacheControl json.RawMessage `json:"cache_control"`
		} `json:"tools"`
		Messages []struct {
			Content []map[string]json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(reqs[len(reqs)-1], &body); err != nil {
		t.Fatal(err)
	}
	if len(body.System) != 2 || !strings.Contains(body.System[1].Text, "from CLAUDE.md") || !strings.Contains(body.System[1].Text, "Always run make check.") ||
		!strings.Contains(body.System[1].Text, "from AGENTS.md") || body.System[1].CacheControl == nil || body.System[0].CacheControl != nil {
		t.Errorf("system blocks: %+v", body.System)
	}
	if n := len(body.Tools); n == 0 || body.Tools[n-1].CacheControl == nil || body.Tools[n-1].Name != taskToolName {
		t.Errorf("the last tool carries no cache breakpoint: %+v", body.Tools)
	}
	lastMsg := body.Messages[len(body.Messages)-1]
	if lastMsg.Content[len(lastMsg.Content)-1]["cache_control"] == nil {
		t.Error("the conversation's tail carries no cache breakpoint")
	}
	// The transcript keeps the message without it.
	for _, r := range f.records(t) {
		if strings.Contains(string(r), "cache_control") {
			t.Errorf("a cache breakpoint was persisted: %s", r)
		}
	}
}

func TestCompactionKeepsTheWorkGoing(t *testing.T) {
	f := newFixture(t, &Options{ContextWindow: 2000, CompactAt: 0.5}, nil)
	var notices []string
	for i := 0; i < 12; i++ {
		s := &sink{}
		if _, err := f.run(t, strings.Repeat("a long message to grow the context ", 10), s); err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		for _, ev := range s.Events() {
			if ev.Kind == contract.KindNotice {
				notices = append(notices, ev.Text)
			}
		}
	}
	if len(notices) == 0 {
		t.Fatal("the context was never compacted")
	}
	// The transcript restarts from the summary and stays valid.
	recs := f.records(t)
	var first wireMessage
	json.Unmarshal(recs[0], &first)
	if first.Role != "user" || !strings.Contains(first.Content[0].Text, "This conversation was compacted") {
		t.Fatalf("the transcript does not start with the summary: %s", recs[0])
	}
	merged, err := mergeUserRuns(recs)
	if err != nil {
		t.Fatal(err)
	}
	validateHistory(t, merged)
	// A compaction request asked for a summary without the user's new text.
	var asked bool
	for _, body := range f.sim.Requests() {
		if strings.Contains(string(body), "[Context compaction]") {
			asked = true
		}
	}
	if !asked {
		t.Error("no compaction request reached the model")
	}
}

// echoTool is a tool a ToolSource offers.
type echoTool struct{}

func (echoTool) Name() string        { return "mcp__demo__echo" }
func (echoTool) Description() string { return "Echo the text back." }
func (echoTool) InputSchema() map[string]any {
	return map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}}
}
func (echoTool) Run(_ context.Context, c tools.Call) (tools.Result, error) {
	var in struct{ Text string }
	json.Unmarshal(c.Input, &in)
	return tools.Result{Output: "echo: " + in.Text}, nil
}

type sourceFunc func(context.Context, *harness.Turn) ([]tools.Tool, error)

func (f sourceFunc) Tools(ctx context.Context, t *harness.Turn) ([]tools.Tool, error) {
	return f(ctx, t)
}

func TestToolSources(t *testing.T) {
	good := sourceFunc(func(context.Context, *harness.Turn) ([]tools.Tool, error) { return []tools.Tool{echoTool{}}, nil })
	bad := sourceFunc(func(context.Context, *harness.Turn) ([]tools.Tool, error) {
		return nil, errors.New(`MCP server "broken" did not start`)
	})
	f := newFixture(t, &Options{ToolSources: []ToolSource{bad, good}}, nil)
	s := &sink{}
	if _, err := f.run(t, `[[tool:mcp__demo__echo {"text":"hi"}]]`, s); err != nil {
		t.Fatalf("a failing source failed the turn: %v", err)
	}
	var notice, result string
	for _, ev := range s.Events() {
		switch ev.Kind {
		case contract.KindNotice:
			notice = ev.Text
		case contract.KindToolFinished:
			result = ev.Tool.Output
		}
	}
	if !strings.Contains(notice, `"broken" did not start`) || result != "echo: hi" {
		t.Fatalf("notice %q, result %q", notice, result)
	}
}
