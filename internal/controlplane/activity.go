package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/sse"
	"github.com/talkide/platform/internal/store"
)

// Whether a conversation's turn runs, for the conversation list. The
// replica keeps what it sees anyway: the turn.started and terminal events
// of every stream it relays (hubs and catch-ups), the turn a message it
// forwarded started, and every session state it reads from a worker. What
// it cannot see, a turn started through another replica (or before this
// one started) and the end of a turn no relayed stream follows, it asks
// the workers: a list reads each of its tenant-envs' running sessions
// (GET /v1/sessions, one signed call per tenant-env) at most every
// activityRecheck, and learns from that which turns run; a turn it
// believed running that the listing leaves out it asks about (a GET of the
// session), and learns its end from that. A worker that answers the
// listing with an error (an older one: 405) is asked, as before there was
// one, about each turn believed to run that no relayed stream follows. A
// worker that does not answer at all stalls one list for
// activityCheckTimeout; the lists after it answer from the marks while its
// listing, and those questions, run in the background, until it answers
// again.
//
// During a worker's rolling update two replicas serve one tenant-env and
// a call reaches one of them: a turn on the other shows from the next
// listing that reaches it, or as soon as this replica relays the
// conversation; and a listing from the replica that does not hold a
// running session cannot end its mark, because only the holder of a
// session's lease answers its state (the other says session_elsewhere).

// Bounds of the checks one list makes of the workers.
const (
	// activityRecheck is how often a tenant-env's running sessions are
	// read, and a turn nobody follows asked about, at most.
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
	// listed is when each tenant-env's running sessions were last asked
	// for (guarded by mu); an entry is taken before the call, so lists at
	// the same moment make one call.
	listed map[envKey]time.Time
	// unanswered holds the tenant-envs whose worker did not answer the
	// last listing (guarded by mu): their next listings run in the
	// background, so a worker that is down stalls one list, not one every
	// activityRecheck.
	unanswered map[envKey]bool
}

type envKey struct{ tenant, env string }

const activitySweep = 256

func newActivity(now func() time.Time) *activity {
	return &activity{now: now, m: map[string]turnMark{}, listed: map[envKey]time.Time{}, unanswered: map[envKey]bool{}}
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

// takeListing reports whether the caller should read env's running
// sessions now, and if so notes that it does.
func (a *activity) takeListing(k envKey) bool {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if now.Sub(a.listed[k]) < activityRecheck {
		return false
	}
	a.listed[k] = now
	if len(a.listed) > activitySweep {
		for e, at := range a.listed {
			if now.Sub(at) > activityForget {
				delete(a.listed, e)
				delete(a.unanswered, e)
			}
		}
	}
	return true
}

// listing learns from a tenant-env's running sessions, read after before
// answered notes whether k's worker answered its last listing.
func (a *activity) answered(k envKey, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ok {
		delete(a.unanswered, k)
	} else {
		a.unanswered[k] = true
	}
}

// down says whether k's worker did not answer its last listing.
func (a *activity) down(k envKey) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.unanswered[k]
}

// was taken of the marks of cs (that env's listed conversations): each
// listed session runs. It returns the conversations believed to run that
// are not listed: probably ended, but during a worker's rolling update the
// listing may have come from the replica that does not hold them, so the
// caller asks about each (a session's state is answered only by the
// replica holding its lease). Only sessions of cs count: marks are kept by
// conversation id alone, and a worker speaks for its own tenant-env, never
// for another's.
func (a *activity) listing(rs contract.RunningSessions, cs []store.Conversation, before map[string]turnMark) (gone []store.Conversation) {
	ours := make(map[string]bool, len(cs))
	for _, c := range cs {
		ours[c.ID] = true
	}
	listed := make(map[string]bool, len(rs.Sessions))
	for _, st := range rs.Sessions {
		if st.Status == contract.StatusRunning && ours[st.ConversationID] {
			listed[st.ConversationID] = true
			a.state(st)
		}
	}
	if rs.Truncated {
		return nil
	}
	for _, c := range cs {
		if mk, ok := before[c.ID]; ok && mk.running && !listed[c.ID] {
			gone = append(gone, c)
		}
	}
	return gone
}

// conversationStatus fills views' Status (and RunningTurnID) from the
// marks, first reading the running sessions of the conversations'
// tenant-envs not read in the last activityRecheck (at most
// maxActivityChecks of them), then asking about each turn believed to run
// that a listing left out, and, for a tenant-env whose worker does not
// answer the listing, about the turns believed to run that no relayed
// stream follows, one by one.
func (s *Server) conversationStatus(ctx context.Context, cs []store.Conversation, views []ConversationView) {
	byEnv := map[envKey][]store.Conversation{}
	var order []envKey
	for _, c := range cs {
		k := envKey{c.Tenant, c.Env}
		if _, ok := byEnv[k]; !ok {
			order = append(order, k)
		}
		byEnv[k] = append(byEnv[k], c)
	}
	var mu sync.Mutex
	var unlisted []store.Conversation // of tenant-envs whose listing failed
	var gone []store.Conversation     // believed to run, not listed
	var wg sync.WaitGroup
	sem := make(chan struct{}, activityParallel)
	checks := 0
	for _, k := range order {
		if checks == maxActivityChecks || !s.activity.takeListing(k) {
			continue
		}
		checks++
		envCs := byEnv[k]
		if s.activity.down(k) {
			// Its worker did not answer last time: this list shows the
			// marks as they are, and the listing (with the questions it
			// leads to) runs on its own, for the next list.
			bg := context.WithoutCancel(ctx)
			go func() {
				g, u, _ := s.listEnv(bg, k, envCs)
				s.readStates(bg, append(g, s.unfollowed(u)...))
			}()
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			g, u, answered := s.listEnv(ctx, k, envCs)
			if !answered {
				// Asking a worker that just did not answer about each
				// turn would stall this list again: that goes on its own.
				go s.readStates(context.WithoutCancel(ctx), s.unfollowed(u))
				u = nil
			}
			mu.Lock()
			gone = append(gone, g...)
			unlisted = append(unlisted, u...)
			mu.Unlock()
		})
	}
	wg.Wait()
	s.readStates(ctx, append(gone, s.unfollowed(unlisted)...))
	for i := range views {
		views[i].Status = contract.StatusIdle
		if mk, ok := s.activity.mark(views[i].ID); ok && mk.running {
			views[i].Status = contract.StatusRunning
			views[i].RunningTurnID = mk.turn
		}
	}
}

// listEnv reads the running sessions of k's worker and learns from them
// for cs, k's listed conversations. It returns the conversations believed
// to run that the listing left out (gone), or, when the worker did not
// list them, all of cs (unlisted); answered is false when the worker did
// not answer at all.
func (s *Server) listEnv(ctx context.Context, k envKey, cs []store.Conversation) (gone, unlisted []store.Conversation, answered bool) {
	before := make(map[string]turnMark, len(cs))
	for _, c := range cs {
		if mk, ok := s.activity.mark(c.ID); ok {
			before[c.ID] = mk
		}
	}
	cctx, cancel := context.WithTimeout(ctx, activityCheckTimeout)
	defer cancel()
	wc, err := s.workerFor(cctx, k.tenant, k.env)
	if err != nil {
		return nil, nil, true // no worker to ask: nothing to wait for either
	}
	var rs contract.RunningSessions
	if _, err := wc.do(cctx, http.MethodGet, contract.SessionsPath, "", nil, &rs); err != nil {
		// A worker that answered (an older one without the listing
		// answers 405) is asked one by one, as before; one that did not
		// answer at all is listed in the background from now on, until
		// it answers again.
		var he *httpapi.Error
		answered = errors.As(err, &he)
		s.activity.answered(k, answered)
		return nil, cs, answered
	}
	s.activity.answered(k, true)
	return s.activity.listing(rs, cs, before), nil, true
}

// unfollowed returns the conversations of cs believed to run that no
// relayed stream follows and that were not learned about in the last
// activityRecheck, in cs's order (newest first).
func (s *Server) unfollowed(cs []store.Conversation) []store.Conversation {
	now := s.cfg.Now()
	var stale []store.Conversation
	for _, c := range cs {
		mk, ok := s.activity.mark(c.ID)
		if ok && mk.running && !s.hubs.following(c.ID) && now.Sub(mk.at) >= activityRecheck {
			stale = append(stale, c)
		}
	}
	return stale
}

// readStates reads the session state of the first maxActivityChecks of
// cs from their workers, which the marks learn from; a worker that does
// not answer leaves its mark as it was.
func (s *Server) readStates(ctx context.Context, cs []store.Conversation) {
	cs = cs[:min(len(cs), maxActivityChecks)]
	var wg sync.WaitGroup
	sem := make(chan struct{}, activityParallel)
	for _, c := range cs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, activityCheckTimeout)
			defer cancel()
			wc, err := s.workerFor(cctx, c.Tenant, c.Env)
			if err != nil {
				return
			}
			s.sessionState(cctx, wc, c.ID)
		})
	}
	wg.Wait()
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
