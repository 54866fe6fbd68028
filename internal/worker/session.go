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

// subscriberBuffer is how many events a stream may fall behind before it is
// switched to replay from the log; the producer never waits for it.
const subscriberBuffer = 256

// session is an open conversation on this worker.
type session struct {
	w     *Worker
	id    string
	store *sessionstore.Session

	mu sync.Mutex
	// guarded by mu
	running *runningTurn
	turns   int
	seen    map[string]contract.SendMessageResponse // by client message id
	subs    map[*subscriber]struct{}
}

type runningTurn struct {
	id     string
	cancel context.CancelFunc
	done   chan struct{}
}

type subscriber struct {
	ch chan contract.Event
	// lagged is closed (with ch) when the subscriber fell behind.
	lagged bool
}

// openSession rebuilds the in-memory state from the event log. A turn that
// started but never finished was cut off by a restart: it is closed now with
// turn.failed(worker_restarted), so no client waits on it forever.
func openSession(w *Worker, st *sessionstore.Session, created bool) (*session, error) {
	s := &session{
		w: w, id: st.Meta().ConversationID, store: st,
		seen: make(map[string]contract.SendMessageResponse),
		subs: make(map[*subscriber]struct{}),
	}
	var openTurn string
	err := st.ReadEvents(0, func(ev contract.Event) error {
		switch ev.Kind {
		case contract.KindUserMessage:
			s.seen[ev.ClientMessageID] = contract.SendMessageResponse{
				ConversationID: s.id, ClientMessageID: ev.ClientMessageID, TurnID: ev.TurnID, Seq: ev.Seq, Duplicate: true,
			}
		case contract.KindTurnStarted:
			s.turns++
			openTurn = ev.TurnID
		case contract.KindTurnFinished, contract.KindTurnFailed:
			if ev.TurnID == openTurn {
				openTurn = ""
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
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
	if openTurn != "" {
		s.emit(contract.Event{Kind: contract.KindTurnFailed, TurnID: openTurn, Failure: &contract.TurnFailure{
			Code: contract.FailWorkerRestarted, Message: "the worker restarted while this turn was running; send the message again to continue", Retryable: true,
		}})
		w.log.Warn("closed a turn cut off by a restart", "conversation", s.id, "turn", openTurn)
	}
	return s, nil
}

// emit appends ev to the log and hands it to every subscriber. It never
// blocks on a subscriber.
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
		// The event is not durable, so it must not be streamed with an id a
		// client could later fail to replay.
		s.w.log.Error("event not recorded", "conversation", s.id, "kind", ev.Kind, "err", err)
		return
	}
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

func (s *session) subscribe() *subscriber {
	sub := &subscriber{ch: make(chan contract.Event, subscriberBuffer)}
	s.mu.Lock()
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	return sub
}

func (s *session) unsubscribe(sub *subscriber) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.subs[sub]; ok {
		delete(s.subs, sub)
		close(sub.ch)
	}
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
			r.IdempotencyKey = s.id + "/" + r.IdempotencyKey
			s.w.cfg.Reporter.Enqueue(r)
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
func (t transcript) Append(rec json.RawMessage) error    { return t.s.AppendTranscript(rec) }
