package worker

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
)

// Every turn ends with one turn_ended report carrying the main agent's
// text: not a sub-agent's, not a tool's input or output.
func TestTurnEndedReport(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	tw.create(t, "conv-1")
	_, sent := tw.sendMessage(t, "conv-1", "m-1", "fix the test")
	ft := tw.h.next(t)
	ft.Emit(contract.Event{Kind: contract.KindTextDelta, Text: "Looking"})
	ft.Emit(contract.Event{Kind: contract.KindMessage, Text: "Looking at the scheduler."})
	ft.Emit(contract.Event{Kind: contract.KindToolStarted, Tool: &contract.ToolEvent{ID: "tu1", Name: "Task", Input: []byte(`{"prompt":"secret-ish input"}`)}})
	ft.Emit(contract.Event{Kind: contract.KindMessage, Text: "sub-agent text", ParentToolUseID: "tu1"})
	ft.Emit(contract.Event{Kind: contract.KindToolFinished, Tool: &contract.ToolEvent{ID: "tu1", Name: "Task", Output: "tool output"}})
	ft.Emit(contract.Event{Kind: contract.KindMessage, Text: "  The race is fixed.  "})
	ft.finish("end_turn")
	var ended []contract.Report
	for _, r := range tw.turnReports(t, ft, "conv-1", sent.TurnID) {
		if r.Kind == contract.ReportTurnEnded {
			ended = append(ended, r)
		}
	}
	if len(ended) != 1 {
		t.Fatalf("%d turn_ended reports, want 1: %+v", len(ended), ended)
	}
	r := ended[0]
	if r.TurnID != sent.TurnID || r.ConversationID != "conv-1" || r.IdempotencyKey != "conv-1/"+sent.TurnID+"/turn-ended" {
		t.Errorf("report %+v", r)
	}
	if diff := cmp.Diff(&contract.TurnReply{Text: "Looking at the scheduler.\n\nThe race is fixed."}, r.Reply); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
}

// turnReports waits for ft, of conversation conv, to end and returns
// what the session's outbox holds then.
func (tw *testWorker) turnReports(t *testing.T, ft *fakeTurn, conv, turnID string) []contract.Report {
	t.Helper()
	tw.openStream(t, conv, "", "").mustUntil(t, terminal(turnID))
	ft.waitEnded(t)
	// The turn_ended report is written before the session is idle again.
	for deadline := time.Now().Add(waitFor); tw.session(t, conv).turnRunning(); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("the session is still running its turn")
		}
	}
	rs, err := tw.session(t, conv).store.AllReports()
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestReplyTextBounded(t *testing.T) {
	var r replyText
	r.add(strings.Repeat("a", contract.MaxReplyText-3))
	r.add("ééé") // "\n\n" and half of é fit: cut before it
	r.add("more")
	got := r.report()
	if !got.Truncated || len(got.Text) != contract.MaxReplyText-1 || !strings.HasSuffix(got.Text, "a\n\n") {
		t.Errorf("reply of %d bytes, truncated %t, ending %q", len(got.Text), got.Truncated, got.Text[len(got.Text)-4:])
	}
	if err := (contract.Report{IdempotencyKey: "k", Kind: contract.ReportTurnEnded, ConversationID: "c", TurnID: "t",
		Time: time.Now(), Reply: &got}).Validate(time.Now()); err != nil {
		t.Errorf("the cut reply is refused: %v", err)
	}
}
