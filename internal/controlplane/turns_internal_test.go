package controlplane

import (
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/fakeclock"
)

// TestTurnOf: a call goes to the turn whose span holds it, else to the
// nearer of the turns around it, and to the first or last turn outside
// them all; a running turn holds everything after its start.
func TestTurnOf(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s := func(d time.Duration) time.Time { return t0.Add(d * time.Second) }
	evs := []logEvent{
		{seq: 1, kind: contract.KindSessionCreated, time: s(0)},
		{seq: 2, kind: contract.KindTurnStarted, turnID: "a", time: s(10)},
		{seq: 3, kind: contract.KindTurnFinished, turnID: "a", time: s(20)},
		{seq: 4, kind: contract.KindTurnStarted, turnID: "b", time: s(40)},
		{seq: 5, kind: contract.KindTurnFailed, turnID: "b", time: s(50)},
		{seq: 6, kind: contract.KindTurnFinished, turnID: "b", time: s(55)}, // a second terminal event keeps the first
		{seq: 7, kind: contract.KindTurnStarted, turnID: "c", time: s(60)},
	}
	spans := turnSpans(evs)
	if len(spans) != 3 || !spans[1].end.Equal(s(50)) || spans[2].ended {
		t.Fatalf("spans %+v", spans)
	}
	for at, want := range map[time.Duration]string{
		0: "a", 10: "a", 15: "a", 20: "a", // before the first, and inside
		25: "a", 34: "b", 30: "a", // between a and b: the nearer
		41: "b", 50: "b", 52: "b", 58: "c", // between b and c
		60: "c", 3600: "c", // c runs
	} {
		if got := spans[turnOf(spans, s(at))].id; got != want {
			t.Errorf("a call at %ds goes to %s, want %s", at, got, want)
		}
	}
	ended := spans[:2]
	if got := ended[turnOf(ended, s(3600))].id; got != "b" {
		t.Errorf("a call after the last ended turn goes to %s, want b", got)
	}
}

// TestActivityOrder: what describes an older position of the log than the
// mark kept changes nothing; idle marks are forgotten after a while.
func TestActivityOrder(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	a := newActivity(clk.Now)
	a.learn("c", 5, true, "t2")
	a.learn("c", 3, false, "") // a replay of turn t1's end
	if mk, _ := a.mark("c"); !mk.running || mk.turn != "t2" {
		t.Errorf("an older event moved the mark: %+v", mk)
	}
	a.learn("c", 9, false, "")
	a.learn("c", 4, true, "t2") // a replay of t2's start
	if mk, _ := a.mark("c"); mk.running {
		t.Errorf("a replayed turn.started brought the turn back: %+v", mk)
	}
	a.state(contract.SessionState{ConversationID: "c", Status: contract.StatusRunning, RunningTurnID: "t3", LastSeq: 12})
	if mk, _ := a.mark("c"); !mk.running || mk.turn != "t3" {
		t.Errorf("a newer state was not taken: %+v", mk)
	}
	a.learn("idle", 1, false, "")
	clk.Advance(activityForget + time.Second)
	for i := range activitySweep {
		a.learn("other", int64(i), false, "")
	}
	if _, ok := a.mark("idle"); ok {
		t.Error("an idle mark was kept past activityForget")
	}
	if _, ok := a.mark("c"); !ok {
		t.Error("a running mark was forgotten")
	}
}
