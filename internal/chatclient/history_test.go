package chatclient

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
)

func TestParseRecent(t *testing.T) {
	good := map[string]int{"0": 0, "3": 3, " 12 ": 12, "all": RecentAll, "ALL": RecentAll, "none": 0}
	for in, want := range good {
		if got, err := ParseRecent(in); err != nil || got != want {
			t.Errorf("ParseRecent(%q) = %d, %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "-3", "some", "3 turns", "1e3", "0x10"} {
		if got, err := ParseRecent(in); err == nil {
			t.Errorf("ParseRecent(%q) = %d, want an error", in, got)
		}
	}
}

// historyEvents names the events of a history by what they are: "s" a session
// event, "n" a notice, "u1" turn t1's user message, "x1" one of its middle
// events, "e1" its end.
func historyEvents(spec ...string) []contract.Event {
	var evs []contract.Event
	for i, s := range spec {
		ev := contract.Event{Seq: int64(i + 1), Text: s}
		switch s[0] {
		case 's':
			ev.Kind = contract.KindSessionResumed
		case 'n':
			ev.Kind = contract.KindNotice
		case 'u':
			ev.Kind, ev.TurnID = contract.KindUserMessage, "t"+s[1:]
		case 'x':
			ev.Kind, ev.TurnID = contract.KindTextDelta, "t"+s[1:]
		case 'e':
			ev.Kind, ev.TurnID = contract.KindTurnFinished, "t"+s[1:]
		}
		evs = append(evs, ev)
	}
	return evs
}

func TestRecentTurns(t *testing.T) {
	tests := map[string]struct {
		n          int
		history    []string
		want       []string
		wantHidden int
	}{
		"no turns": {n: 3, history: []string{"s", "n"}, want: []string{"s", "n"}},
		"fewer turns than asked": {n: 3,
			history: []string{"s", "n", "u1", "x1", "e1", "u2", "e2"},
			want:    []string{"s", "n", "u1", "x1", "e1", "u2", "e2"}},
		"the last two, and what came after": {n: 2,
			history:    []string{"s", "n", "u1", "e1", "u2", "x2", "e2", "s", "n", "u3", "e3", "n"},
			want:       []string{"u2", "x2", "e2", "s", "n", "u3", "e3", "n"},
			wantHidden: 1},
		"the last one": {n: 1,
			history:    []string{"u1", "e1", "u2", "e2", "u3", "x3", "e3"},
			want:       []string{"u3", "x3", "e3"},
			wantHidden: 2},
		"a notice inside an open turn stays with it": {n: 1,
			history:    []string{"u1", "e1", "u2", "n", "x2"},
			want:       []string{"u2", "n", "x2"},
			wantHidden: 1},
		"a turn without a user message": {n: 1,
			history:    []string{"u1", "e1", "x2", "e2"},
			want:       []string{"x2", "e2"},
			wantHidden: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := &recentTurns{n: tc.n}
			for _, ev := range historyEvents(tc.history...) {
				r.add(ev)
			}
			evs, hidden := r.take()
			var got []string
			for _, ev := range evs {
				got = append(got, ev.Text)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("kept (-want +got):\n%s", diff)
			}
			if hidden != tc.wantHidden {
				t.Errorf("hidden = %d, want %d", hidden, tc.wantHidden)
			}
		})
	}
}

// A reopened conversation: the session's events and notice, five turns,
// and the notice of the session opening again.
func reopenedConv(f *fakeCP) int64 {
	f.mu.Lock()
	c := f.convLocked("c1")
	f.appendLocked(c, contract.Event{Kind: contract.KindSessionCreated}, contract.Event{Kind: contract.KindNotice, Text: "simulated model"})
	f.mu.Unlock()
	for _, text := range []string{"m1", "m2", "m3", "m4", "m5"} {
		f.finishTurn("c1", f.startTurn("c1", text), false)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.appendLocked(c, contract.Event{Kind: contract.KindSessionResumed}, contract.Event{Kind: contract.KindNotice, Text: "simulated model"})
	return int64(len(c.events))
}

func TestSessionShowsRecentTurns(t *testing.T) {
	const (
		notice = "! simulated model\n"
		reply  = "echo: done\n\n"
		new    = "> new\necho: new\n\n"
	)
	tests := map[string]struct {
		recent int
		after  func(last int64) int64
		want   string
	}{
		"the last two": {recent: 2,
			want: "! 3 earlier turns not shown\n> m4\n" + reply + "> m5\n" + reply + notice + new},
		"the last one": {recent: 1,
			want: "! 4 earlier turns not shown\n> m5\n" + reply + notice + new},
		"more than there are": {recent: 10,
			want: notice + "> m1\n" + reply + "> m2\n" + reply + "> m3\n" + reply + "> m4\n" + reply + "> m5\n" + reply + notice + new},
		"all": {recent: RecentAll,
			want: notice + "> m1\n" + reply + "> m2\n" + reply + "> m3\n" + reply + "> m4\n" + reply + "> m5\n" + reply + notice + new},
		"none":               {recent: 0, want: new},
		"a new conversation": {recent: 0, after: func(int64) int64 { return 0 }, want: notice + "> m1\n" + reply + "> m2\n" + reply + "> m3\n" + reply + "> m4\n" + reply + "> m5\n" + reply + notice + new},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFakeCP(t)
			last := reopenedConv(f)
			s, out := newSession(t, f, true)
			s.After, s.Recent = last, tc.recent
			if tc.after != nil {
				s.After = tc.after(last)
			}
			if err := s.Once(testCtx(t), "new"); err != nil {
				t.Fatalf("Once = %v", err)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}
