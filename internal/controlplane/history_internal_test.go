package controlplane

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

func ev(seq int64, kind, turn, tool string) logEvent {
	return logEvent{seq: seq, kind: kind, turnID: turn, toolID: tool, raw: json.RawMessage(fmt.Sprintf(`{"seq":%d}`, seq))}
}

func seqs(evs []logEvent) []int64 {
	out := []int64{}
	for _, e := range evs {
		out = append(out, e.seq)
	}
	return out
}

// TestCompactLog: deltas a finished turn's assistant.message repeats and
// output chunks its tool.finished carries are folded away; a running turn
// comes whole, and deltas no message repeats (an interrupt mid-reply) stay.
func TestCompactLog(t *testing.T) {
	log := []logEvent{
		ev(1, "session.created", "", ""),
		ev(2, "user.message", "a", ""), ev(3, "turn.started", "a", ""),
		ev(4, "text.delta", "a", ""), ev(5, "text.delta", "a", ""), ev(6, "assistant.message", "a", ""),
		ev(7, "usage", "a", ""), ev(8, "tool.started", "a", "k1"),
		ev(9, "tool.output", "a", "k1"), ev(10, "tool.output", "a", "k1"), ev(11, "tool.finished", "a", "k1"),
		ev(12, "text.delta", "a", ""), ev(13, "assistant.message", "a", ""), ev(14, "turn.finished", "a", ""),
		// interrupted mid-reply: its deltas are all there is of the text
		ev(15, "user.message", "b", ""), ev(16, "turn.started", "b", ""),
		ev(17, "text.delta", "b", ""), ev(18, "turn.failed", "b", ""),
		// running: nothing folded
		ev(19, "user.message", "c", ""), ev(20, "turn.started", "c", ""),
		ev(21, "text.delta", "c", ""), ev(22, "assistant.message", "c", ""),
		ev(23, "tool.started", "c", "k2"), ev(24, "tool.output", "c", "k2"),
	}
	got := seqs(compactLog(log))
	want := []int64{1, 2, 3, 6, 7, 8, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("compacted to %v, want %v", got, want)
	}
	if got := compactLog(nil); len(got) != 0 {
		t.Fatalf("an empty log compacts to %v", got)
	}
}
