package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/sessionstore"
	"github.com/talkide/platform/internal/store"
)

// This file holds the checks the kill -9 and two-worker tests apply to a
// session volume.

// sessionLog is a session as the checks read it: validated, with its
// events and transcript.
type sessionLog struct {
	v          sessionstore.Validation
	events     []contract.Event
	raw        map[int64][]byte // event JSON as a stream sends it, by seq
	transcript []json.RawMessage
	reports    []contract.Report
	pending    int // reports after the outbox cursor
}

// readSession validates a session directory and reads it read-only.
func readSession(projects, id string) (*sessionLog, error) {
	v, err := sessionstore.Validate(filepath.Join(projects, id))
	if err != nil {
		return nil, err
	}
	st, err := sessionstore.New(projects, nil)
	if err != nil {
		return nil, err
	}
	s, err := st.Inspect(id)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	l := &sessionLog{v: v, raw: map[int64][]byte{}}
	if err := s.ReadEvents(0, func(ev contract.Event) error {
		b, err := json.Marshal(ev)
		l.events = append(l.events, ev)
		l.raw[ev.Seq] = b
		return err
	}); err != nil {
		return nil, err
	}
	if l.transcript, err = s.Transcript(); err != nil {
		return nil, err
	}
	if l.reports, err = s.AllReports(); err != nil {
		return nil, err
	}
	p, err := s.PendingReports()
	l.pending = len(p)
	return l, err
}

// turns returns the turns in the order they started and, for each, its
// terminal event (nil while it is open). Validate has checked that turns
// never overlap.
func (l *sessionLog) turns() (order []string, end map[string]*contract.Event) {
	end = map[string]*contract.Event{}
	for i, ev := range l.events {
		switch {
		case ev.Kind == contract.KindTurnStarted:
			order = append(order, ev.TurnID)
			end[ev.TurnID] = nil
		case contract.Terminal(ev.Kind):
			end[ev.TurnID] = &l.events[i]
		}
	}
	return order, end
}

// checkReports checks that every report in the conversations' outboxes is
// in the control-plane's store exactly once, the same, and nothing else.
func checkReports(t *testing.T, st store.Store, projects string, convs []string) {
	t.Helper()
	ctx := context.Background()
	total := 0
	for _, id := range convs {
		l, err := readSession(projects, id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if l.pending != 0 {
			t.Errorf("%s: %d reports not acknowledged", id, l.pending)
		}
		want := map[string]contract.Report{}
		for _, r := range l.reports {
			if prev, dup := want[r.IdempotencyKey]; dup {
				t.Errorf("%s: idempotency key %s is used by two reports; the second is lost as a duplicate:\n%+v\n%+v", id, r.IdempotencyKey, prev, r)
			}
			r.Time = r.Time.Truncate(time.Millisecond)
			if r.Kind == contract.ReportTurnEnded {
				r.Reply = nil // the control-plane indexes the reply and stores the report without it
			}
			want[r.IdempotencyKey] = r
		}
		stored, err := st.ListReports(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]contract.Report{}
		for _, sr := range stored {
			if _, dup := got[sr.Report.IdempotencyKey]; dup {
				t.Errorf("%s: report %s stored twice", id, sr.Report.IdempotencyKey)
			}
			got[sr.Report.IdempotencyKey] = sr.Report
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: reports in the outbox vs. in the store (-outbox +store):\n%s", id, diff)
		}
		total += len(want)
	}
	t.Logf("%d reports, each stored once", total)
}
