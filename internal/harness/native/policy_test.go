package native

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/tools"
)

func TestPolicyDeniesToolCall(t *testing.T) {
	policy, err := tools.ParsePolicy([]byte(`{"rules":[
		{"name":"no-touch","tool":"Bash","action":"deny","commands":["touch *"],"reason":"the workspace is read-only here"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, &Options{Policy: policy}, nil)
	s := &sink{}
	res, err := f.run(t, `Touch it. [[tool:Bash {"command":"echo ok && touch marker"}]]`, s)
	if err != nil || res.ModelCalls != 2 {
		t.Fatalf("RunTurn = %+v, %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(f.workspace, "marker")); !os.IsNotExist(err) {
		t.Fatalf("the denied command ran (%v)", err)
	}

	// The user sees the call start and finish with the denial.
	evs := s.Events()
	want := []string{
		contract.KindTextDelta, contract.KindMessage, contract.KindUsage,
		contract.KindToolStarted, contract.KindToolFinished,
		contract.KindTextDelta, contract.KindMessage, contract.KindUsage,
	}
	if diff := cmp.Diff(want, kinds(evs)); diff != "" {
		t.Fatalf("event kinds (-want +got):\n%s", diff)
	}
	const denial = `Denied by policy rule "no-touch": the command "echo ok && touch marker" contains "touch marker", which matches "touch *" (the workspace is read-only here).`
	var finished *contract.ToolEvent
	for _, ev := range evs {
		if ev.Kind == contract.KindToolFinished {
			finished = ev.Tool
		}
	}
	if finished == nil || finished.Name != "Bash" || !finished.IsError || !strings.HasPrefix(finished.Output, denial) {
		t.Errorf("tool.finished %+v, want the denial %q", finished, denial)
	}

	// The model gets it as an is_error tool_result.
	recs := f.records(t)
	validateHistory(t, recs)
	var m wireMessage
	if err := json.Unmarshal(recs[2], &m); err != nil {
		t.Fatal(err)
	}
	var text string
	if len(m.Content) == 1 {
		_ = json.Unmarshal(m.Content[0].Content, &text)
	}
	if len(m.Content) != 1 || m.Content[0].Type != "tool_result" || !m.Content[0].IsError || !strings.HasPrefix(text, denial) {
		t.Errorf("tool result %s", recs[2])
	}
	if last := evs[len(evs)-2]; !strings.Contains(last.Text, "(error) Denied by policy rule") {
		t.Errorf("the model did not see the denial: %+v", last)
	}

	// An allowed call still runs.
	if _, err := f.run(t, `[[tool:Bash {"command":"echo allowed > ok.txt"}]]`, &sink{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(f.workspace, "ok.txt")); err != nil || string(b) != "allowed\n" {
		t.Errorf("ok.txt = %q, %v", b, err)
	}
}

func TestToolStateDir(t *testing.T) {
	f := newFixture(t, nil, nil)
	sessionDir := t.TempDir()
	tr := f.turn(`[[tool:TodoWrite {"todos":[{"content":"ship it","status":"in_progress"}]}]]`, &sink{})
	tr.SessionDir = sessionDir
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := f.h.RunTurn(ctx, tr); err != nil {
		t.Fatal(err)
	}
	got, err := tools.LoadTodos(filepath.Join(sessionDir, "tools"))
	if err != nil || len(got) != 1 || got[0].Content != "ship it" {
		t.Errorf("saved todos %+v, %v", got, err)
	}

	// Without a session directory, the tools keep nothing.
	s := &sink{}
	if _, err := f.run(t, `[[tool:TodoWrite {"todos":[]}]]`, s); err != nil {
		t.Fatal(err)
	}
	for _, ev := range s.Events() {
		if ev.Kind == contract.KindToolFinished && !strings.Contains(ev.Tool.Output, "the list was not saved") {
			t.Errorf("tool.finished %+v", ev.Tool)
		}
	}
}
