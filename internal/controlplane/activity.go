package controlplane

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/sse"
	"github.com/talkide/platform/internal/store"
)

// Whether a conversation's turn runs, as this replica knows it, for the
// conversation list. Asking each conversation's worker on every list would
// cost a signed call per conversation; instead the replica keeps what it
// sees anyway: the turn.started and terminal events of every stream it
// relays (hubs and catch-ups), the turn a message it forwarded started,
// and every session state it reads from a worker. Only a turn believed to
// run that no relayed stream follows is asked about again, at most every
// activityRecheck, so that its end shows even when nobody watches it.
//
// What the replica never saw, it does not know: a turn started through
// another replica, or before this one started, shows as idle here until
// this replica relays the conversation's stream or reads its state.

// Bounds of the checks one list makes of turns nobody follows.
const (
	activityRecheck      = 3 * time.Second
	activityCheckTimeout = 2 * time.Second
	maxActivityChecks    = 16
	activityParallel     = 4
	// activityForget is how long an idle mark is kept: long enough that a
	// replayed old turn.started cannot pass for a new turn, short enough
	// that marks of conversations nobody touches do not pile up.
	activityForget = 10 * time.Minute
)

// turnMark is what the replica last learned of one conversation.
type turnMark struct {
	running bool
	turn    string
	seq     int64     // the log's position the mark describes
	at      time.Time // when it was learned
}

// activity holds the marks, by conversation id.
type activity struct {
	now func() time.Time

	mu     sync.Mutex
	m      map[string]turnMark // guarded by mu
	writes int                 // guarded by mu; a sweep every activitySweep writes
}

const activitySweep = 256

func newActivity(now func() time.Time) *activity {
	return &activity{now: now, m: map[string]turnMark{}}
}

// learn records that at position seq of conversation id's log a turn runs
// (running, with its id) or none does; what describes an older position
// than the mark already kept changes nothing, so a replayed turn.started
// of an old turn does not bring it back.
func (a *activity) learn(id string, seq int64, running bool, turn string) {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if old, ok := a.m[id]; ok && seq < old.seq {
		return
	}
	if !running {
		turn = ""
	}
	a.m[id] = turnMark{running: running, turn: turn, seq: seq, at: now}
	if a.writes++; a.writes%activitySweep == 0 {
		for k, mk := range a.m {
			if !mk.running && now.Sub(mk.at) > activityForget {
				delete(a.m, k)
			}
		}
	}
}

// mark returns what is known of conversation id.
func (a *activity) mark(id string) (turnMark, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	mk, ok := a.m[id]
	return mk, ok
}

// observe learns from one event of a relayed stream: only a turn's start
// and end carry anything here, and only those are decoded.
func (a *activity) observe(convID string, seq int64, ev sse.Event) {
	switch {
	case ev.Event == contract.KindTurnStarted:
		var head struct {
			TurnID string `json:"turn_id"`
		}
		if json.Unmarshal(ev.Data, &head) == nil {
			a.learn(convID, seq, true, head.TurnID)
		}
	case contract.Terminal(ev.Event):
		a.learn(convID, seq, false, "")
	}
}

// state learns from a session state read from the worker.
func (a *activity) state(st contract.SessionState) {
	if st.ConversationID == "" {
		return
	}
	a.learn(st.ConversationID, st.LastSeq, st.Status == contract.StatusRunning, st.RunningTurnID)
}

// conversationStatus fills views' Status (and RunningTurnID) from the
// marks, first asking the workers about turns believed to run that no
// relayed stream follows and that were not checked in the last
// activityRecheck (at most maxActivityChecks of them, newest first).
func (s *Server) conversationStatus(ctx context.Context, cs []store.Conversation, views []ConversationView) {
	now := s.cfg.Now()
	var stale []store.Conversation
	for _, c := range cs {
		mk, ok := s.activity.mark(c.ID)
		if ok && mk.running && !s.hubs.following(c.ID) && now.Sub(mk.at) >= activityRecheck && len(stale) < maxActivityChecks {
			stale = append(stale, c)
		}
	}
	if len(stale) > 0 {
		var wg sync.WaitGroup
		sem := make(chan struct{}, activityParallel)
		for _, c := range stale {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				cctx, cancel := context.WithTimeout(ctx, activityCheckTimeout)
				defer cancel()
				wc, err := s.workerFor(cctx, c.Tenant, c.Env)
				if err != nil {
					return
				}
				var st contract.SessionState
				if _, err := wc.do(cctx, http.MethodGet, contract.SessionPath, c.ID, nil, &st); err == nil {
					s.activity.state(st)
				}
			})
		}
		wg.Wait()
	}
	for i := range views {
		views[i].Status = contract.StatusIdle
		if mk, ok := s.activity.mark(views[i].ID); ok && mk.running {
			views[i].Status = contract.StatusRunning
			views[i].RunningTurnID = mk.turn
		}
	}
}

// sessionState reads a conversation's session state from its worker and
// notes it for the list's running marks, which every such read keeps
// current at no extra cost.
func (s *Server) sessionState(ctx context.Context, wc *workerClient, id string) (contract.SessionState, error) {
	var st contract.SessionState
	if _, err := wc.do(ctx, http.MethodGet, contract.SessionPath, id, nil, &st); err != nil {
		return contract.SessionState{}, err
	}
	s.activity.state(st)
	return st, nil
}
