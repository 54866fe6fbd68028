package worker

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/minting"
	"github.com/talkide/platform/internal/sessionstore"
)

// sessionstoreRecent is how many client message ids the store keeps for
// idempotent sends.
const sessionstoreRecent = 1024

// subscriberBuffer is how many events a stream may fall behind before it is
// switched to replay from the log; the producer never waits for it.
const subscriberBuffer = 256

// session is an open conversation on this worker; it holds the session's
// lease while it is open.
type session struct {
	w     *Worker
	id    string
	store *sessionstore.Session

	mu sync.Mutex
	// guarded by mu
	running  *runningTurn
	turns    int
	seen     map[string]contract.SendMessageResponse // by client message id, the recent ones
	subs     map[*subscriber]struct{}
	pending  []contract.Event // appended, waiting to be durable before they are published
	flushing bool             // a flusher goroutine is running
	lastUsed time.Time
	closed   bool
}

type runningTurn struct {
	id     string
	cancel context.CancelFunc
	done   chan struct{}
}

type subscriber struct {
	ch chan contract.Event
	// lagged is set (and ch closed) when the subscriber fell behind.
	lagged bool
}

// openSession rebuilds the in-memory state from the store's event state (a
// checkpoint and the tail after it, not the history). A turn that started
// but never finished was cut off by a restart: it is closed now with
// turn.failed(worker_restarted), so no client waits on it forever.
func openSession(w *Worker, st *sessionstore.Session, created bool) (*session, error) {
	s := &session{
		w: w, id: st.Meta().ConversationID, store: st,
		seen:     make(map[string]contract.SendMessageResponse),
		subs:     make(map[*subscriber]struct{}),
		lastUsed: w.cfg.Now(),
	}
	state := st.State()
	s.turns = state.Turns
	for _, m := range state.Recent {
		s.seen[m.ClientMessageID] = contract.SendMessageResponse{
			ConversationID: s.id, ClientMessageID: m.ClientMessageID, TurnID: m.TurnID, Seq: m.Seq, Duplicate: true,
		}
	}
	if created {
		s.emit(contract.Event{Kind: contract.KindSessionCreated, Session: &contract.SessionEvent{Harness: w.cfg.Harness.Name(), WorkerID: w.cfg.WorkerID}})
	} else {
		n := 0
		if recs, err := st.Transcript(); err == nil {
			n = len(recs)
		}
		s.emit(contract.Event{Kind: contract.KindSessionResumed, Session: &contract.SessionEvent{Harness: w.cfg.Harness.Name(), WorkerID: w.cfg.WorkerID, Messages: n}})
	}
	if w.cfg.Notice != "" {
		s.emit(contract.Event{Kind: contract.KindNotice, Text: w.cfg.Notice})
	}
	if state.OpenTurn != "" {
		s.emit(contract.Event{Kind: contract.KindTurnFailed, TurnID: state.OpenTurn, Failure: &contract.TurnFailure{
			Code: contract.FailWorkerRestarted, Message: "the worker restarted while this turn was running; send the message again to continue", Retryable: true,
		}})
		w.log.Warn("closed a turn cut off by a restart", "conversation", s.id, "turn", state.OpenTurn)
	}
	return s, nil
}

// emit appends ev to the log; it reaches subscribers once it is durable.
// It never blocks on a subscriber or on the disk.
func (s *session) emit(ev contract.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emitLocked(ev)
}

func (s *session) emitLocked(ev contract.Event) {
	ev.ConversationID = s.id
	if ev.Time.IsZero() {
		ev.Time = s.w.newEventTime()
	}
	if err := s.store.AppendEvent(&ev); err != nil {
		// An event that is not in the log must not be streamed with an id
		// a client could later fail to replay.
		s.w.log.Error("event not recorded", "conversation", s.id, "kind", ev.Kind, "err", err)
		return
	}
	s.pending = append(s.pending, ev)
	if !s.flushing {
		s.flushing = true
		go s.flush()
	}
}

// flush makes pending events durable (one fsync for all that have
// accumulated: group commit) and then publishes them in order. A client is
// never shown an event a crash could still lose.
func (s *session) flush() {
	backoff := 10 * time.Millisecond
	for {
		err := s.store.Sync()
		s.mu.Lock()
		if err != nil {
			s.mu.Unlock()
			s.w.log.Error("session sync failed; events held back until it succeeds", "conversation", s.id, "err", err)
			time.Sleep(backoff)
			backoff = min(backoff*2, time.Second)
			continue
		}
		durable := s.store.DurableSeq()
		n := 0
		for n < len(s.pending) && s.pending[n].Seq <= durable {
			s.publishLocked(s.pending[n])
			n++
		}
		s.pending = append(s.pending[:0], s.pending[n:]...)
		if len(s.pending) == 0 {
			s.flushing = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
}

func (s *session) publishLocked(ev contract.Event) {
	for sub := range s.subs {
		select {
		case sub.ch <- ev:
		default:
			sub.lagged = true
			close(sub.ch)
			delete(s.subs, sub)
		}
	}
}

// report writes r to the session's outbox and tells the reporter.
func (s *session) report(r contract.Report) {
	if _, err := s.store.AppendReport(r); err != nil {
		s.w.log.Error("report not recorded", "conversation", s.id, "kind", r.Kind, "err", err)
		return
	}
	s.w.cfg.Reporter.Notify(s.store)
}

// subscribe registers a live subscriber. On a closed session its channel is
// closed at once, and the stream ends; the client reconnects.
func (s *session) subscribe() *subscriber {
	sub := &subscriber{ch: make(chan contract.Event, subscriberBuffer)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		close(sub.ch)
		return sub
	}
	s.subs[sub] = struct{}{}
	s.lastUsed = s.w.cfg.Now()
	return sub
}

func (s *session) unsubscribe(sub *subscriber) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.subs[sub]; ok {
		delete(s.subs, sub)
		close(sub.ch)
	}
	s.lastUsed = s.w.cfg.Now()
}

// idle reports whether the session may be closed: no turn, no stream, no
// report waiting, and unused since before.
func (s *session) idle(before time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running != nil || len(s.subs) > 0 || len(s.pending) > 0 || s.flushing || !s.lastUsed.Before(before) {
		return false
	}
	p, err := s.store.PendingReports()
	return err == nil && len(p) == 0
}

// close ends the session's streams and closes its store, which writes a
// checkpoint and releases the lease.
func (s *session) close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.closeSubscribers()
	return s.store.Close()
}

func (s *session) closeSubscribers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.subs {
		close(sub.ch)
		delete(s.subs, sub)
	}
}

func (s *session) state() contract.SessionState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := contract.SessionState{
		ConversationID: s.id,
		Status:         contract.StatusIdle,
		LastSeq:        s.store.LastSeq(),
		Turns:          s.turns,
		CreatedAt:      s.store.Meta().CreatedAt,
		Harness:        s.store.Meta().Harness,
	}
	if s.running != nil {
		st.Status = contract.StatusRunning
		st.RunningTurnID = s.running.id
	}
	return st
}

// errTurnRunning refuses a message while a turn runs.
type errTurnRunning struct{ turnID string }

func (e errTurnRunning) Error() string { return "a turn is running: " + e.turnID }

// send starts a turn for a user message, or returns the turn a previous
// call with the same client message id started.
func (s *session) send(req contract.SendMessageRequest) (contract.SendMessageResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.seen[req.ClientMessageID]; ok {
		return prev, nil
	}
	if s.running != nil {
		return contract.SendMessageResponse{}, errTurnRunning{s.running.id}
	}
	if err := s.w.beginTurn(); err != nil {
		return contract.SendMessageResponse{}, err
	}
	turnID := contract.NewID("t_")
	user := contract.Event{Kind: contract.KindUserMessage, TurnID: turnID, ClientMessageID: req.ClientMessageID, Text: req.Text}
	s.emitLocked(user)
	seq := s.store.LastSeq()
	s.emitLocked(contract.Event{Kind: contract.KindTurnStarted, TurnID: turnID})
	s.turns++
	resp := contract.SendMessageResponse{ConversationID: s.id, ClientMessageID: req.ClientMessageID, TurnID: turnID, Seq: seq}
	dup := resp
	dup.Duplicate = true
	s.seen[req.ClientMessageID] = dup
	if len(s.seen) > 2*sessionstoreRecent {
		// Keep only what the store remembers for idempotency.
		s.seen = make(map[string]contract.SendMessageResponse, sessionstoreRecent)
		for _, m := range s.store.State().Recent {
			s.seen[m.ClientMessageID] = contract.SendMessageResponse{
				ConversationID: s.id, ClientMessageID: m.ClientMessageID, TurnID: m.TurnID, Seq: m.Seq, Duplicate: true,
			}
		}
	}
	s.lastUsed = s.w.cfg.Now()

	ctx, cancel := context.WithCancel(s.w.base)
	rt := &runningTurn{id: turnID, cancel: cancel, done: make(chan struct{})}
	s.running = rt
	go s.run(ctx, rt, req.Text)
	return resp, nil
}

// run executes one turn and closes it with a terminal event.
func (s *session) run(ctx context.Context, rt *runningTurn, text string) {
	defer s.w.turns.Done()
	defer close(rt.done)
	defer rt.cancel()
	log := s.w.log.With("conversation", s.id, "turn", rt.id)
	start := time.Now()
	meta := s.store.Meta()
	t := &harness.Turn{
		ConversationID: s.id,
		TurnID:         rt.id,
		UserID:         meta.UserID,
		Text:           text,
		SessionDir:     s.store.Dir(),
		Workspace:      s.w.workspace(s.id),
		Transcript:     transcript{s.store},
		Emit: func(ev contract.Event) {
			ev.TurnID = rt.id
			s.emit(ev)
		},
		Report: func(r contract.Report) {
			r.ConversationID = s.id
			r.TurnID = rt.id
			if r.Time.IsZero() {
				r.Time = s.w.newEventTime()
			}
			if r.IdempotencyKey == "" {
				r.IdempotencyKey = contract.NewID("r_")
			}
			// The turn id makes the key unique even when the harness's
			// key is not across restarts (the simulator's message ids
			// start again at msg_sim_000001): a reused key would make the
			// control-plane drop a new fact as a duplicate.
			r.IdempotencyKey = s.id + "/" + rt.id + "/" + r.IdempotencyKey
			s.report(r)
		},
	}
	res, err := s.w.cfg.Harness.RunTurn(minting.WithConversation(ctx, s.id), t)
	s.mu.Lock()
	if err != nil {
		f := harness.Failure(err)
		if ctx.Err() != nil {
			f = harness.Failure(context.Canceled)
			if s.w.isClosing() {
				// Cut off by the end of the shutdown grace period, not by
				// the user.
				f = contract.TurnFailure{Code: contract.FailWorkerRestarted, Retryable: true,
					Message: "the worker shut down before this turn finished; send the message again to continue"}
			}
		}
		s.emitLocked(contract.Event{Kind: contract.KindTurnFailed, TurnID: rt.id, Failure: &f})
		log.Info("turn failed", "code", f.Code, "err", err)
	} else {
		s.emitLocked(contract.Event{Kind: contract.KindTurnFinished, TurnID: rt.id, Finish: &contract.TurnFinish{
			StopReason: res.StopReason, ModelCalls: res.ModelCalls, DurationMS: time.Since(start).Milliseconds(),
		}})
		log.Info("turn finished", "stop_reason", res.StopReason, "model_calls", res.ModelCalls, "duration", time.Since(start))
	}
	s.running = nil
	s.lastUsed = s.w.cfg.Now()
	s.mu.Unlock()
	if err := s.store.Sync(); err != nil {
		log.Error("session sync failed", "err", err)
	}
}

// interrupt cancels the running turn and waits until it has closed.
func (s *session) interrupt(ctx context.Context) (contract.InterruptResponse, error) {
	s.mu.Lock()
	rt := s.running
	s.mu.Unlock()
	resp := contract.InterruptResponse{ConversationID: s.id}
	if rt == nil {
		return resp, nil
	}
	rt.cancel()
	select {
	case <-rt.done:
	case <-ctx.Done():
		return resp, ctx.Err()
	}
	resp.TurnID, resp.Interrupted = rt.id, true
	return resp, nil
}

// transcript adapts the session store to harness.Transcript.
type transcript struct{ s *sessionstore.Session }

func (t transcript) Records() ([]json.RawMessage, error) { return t.s.Transcript() }
func (t transcript) Append(rec json.RawMessage) error    { return t.s.AppendTranscript(rec, false) }
func (t transcript) Compact(rec json.RawMessage) error   { return t.s.AppendTranscript(rec, true) }
