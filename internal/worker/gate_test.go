package worker

import (
	"context"
	"errors"
	"testing"

	"github.com/talkide/platform/internal/poll"
)

func TestTurnGate(t *testing.T) {
	base, cutOff := context.WithCancel(context.Background())
	defer cutOff()
	g := newTurnGate(base, 0)
	ctx1, cancel1, err := g.begin()
	if err != nil {
		t.Fatal(err)
	}
	defer cancel1()
	_, cancel2, err := g.begin()
	if err != nil {
		t.Fatal(err)
	}
	cancel2()
	if g.closing() {
		t.Fatal("closing before close")
	}

	idle := g.close()
	if !g.closing() {
		t.Error("not closing after close")
	}
	if _, _, err := g.begin(); !errors.Is(err, errShuttingDown) {
		t.Errorf("begin after close = %v, want errShuttingDown", err)
	}
	g.end()
	if poll.Closed(idle) {
		t.Fatal("idle with a turn still running")
	}
	if g.close() != idle {
		t.Error("a second close returned another channel")
	}
	if ctx1.Err() != nil {
		t.Fatal("a turn's context ended before the base did")
	}
	cutOff()
	if ctx1.Err() == nil {
		t.Error("cancelling the base did not reach the turn")
	}
	g.end()
	if !poll.Closed(idle) {
		t.Error("not idle after the last turn ended")
	}

	if empty := newTurnGate(context.Background(), 0).close(); !poll.Closed(empty) {
		t.Error("a gate with no turn is not idle at once")
	}
}
