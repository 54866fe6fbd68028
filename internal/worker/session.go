package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/observe"
	"github.com/talkide/platform/internal/sandbox"
	"github.com/talkide/platform/internal/sessionstore"
)

// sessionstoreRecent is how many client message ids the store keeps for
// idempotent sends.
const sessionstoreRecent = 1024

// subscriberBuffer is how many events a stream may fall behind before it is
// switched to replay from the log; the producer never waits for it.
const subscriberBuffer = 256

// sessionConfig is what a session takes from its worker: the turn gate,
// the harness, the reporter and the worker's settings. A session never calls
// back into its worker, so no lock of the worker is taken while a session's
// is held. One sessionConfig is shared, read-only, by a worker's sessions.
type sessionConfig struct {
	gate       *turnGate
	harness    harness.Harness
	reporter   *Reporter    // nil: reports stay in the outbox
	log        *slog.Logger // with the worker's tenant and env
	now        func() time.Time
	workerID   string
	notices    []string
	jail       func(conversationID, workspace string) *sandbox.Jail // nil: turns get none
	workspaces string                                               // holds one working tree per conversation
	syncRetry  backoff.Policy
	tracer     trace.Tracer // nil: tracing off
	tenant     string
	env        string
}

// jail returns the sandbox of this conversation's processes, nil when the
// worker gives none.
func (s *session) jail() *sandbox.Jail {
	if s.cfg.jail == nil {
		return nil
	}
	return s.cfg.jail(s.id, filepath.Join(s.cfg.workspaces, s.id))
}

// session is an open conversation on this worker; it holds the session's
// lease while it is open.
type session struct {
	cfg   *sessionConfig
	id    string
	store *sessionstore.Session
	log   *slog.Logger // with the conversation

	// The flusher is the session's one goroutine that syncs the store and
	// publishes what became durable. It runs from openSession until close,
	// which stops it and waits for it; it closes the store on its way out.
	wake        chan struct{}      // buffered(1): events are pending
	stopFlusher context.CancelFunc // ends flushCtx: close the store and exit
	flushCtx    context.Context
	flushed     chan struct{} // closed when the flusher has exited
	closeErr    error         // what closing the store returned; written before flushed is closed

	mu sync.Mutex
	// guarded by mu
	running  *runningTurn
	turns    int
	seen     map[string]contract.SendMessageResponse // by client message id, the recent ones
	subs     map[*subscriber]struct{}
	pending  []contract.Event // appended, waiting to be durable before they are published
	lastUsed time.Time
	closed   bool
}

type runningTurn struct {
	span   trace.Span // the turn's; ended by run
	id     string
	cancel context.CancelFunc
	done   chan struct{}
}

type subscriber struct {
	ch chan contract.Event
	// lagged is set (and ch closed) when the subscriber fell behind.
	lagged bool
}

// openSession starts the session's flusher and rebuilds the in-memory state
// from the store's event state (a checkpoint and the tail after it, not the
// history). A turn that started but never finished was cut off by a
// restart: it is closed now with turn.failed(worker_restarted), so no client
// waits on it forever. The session owns st from here on: its close closes st.
func openSession(cfg *sessionConfig, st *sessionstore.Session, created bool) *session {
	id := st.Meta().ConversationID
	s := &session{
		cfg: cfg, id: id, store: st,
		log:      cfg.log.With("conversation", id),
		wake:     make(chan struct{}, 1),
		flushed:  make(chan struct{}),
		seen:     make(map[string]contract.SendMessageResponse),
		subs:     make(map[*subscriber]struct{}),
		lastUsed: cfg.now(),
	}
	s.flushCtx, s.stopFlusher = context.WithCancel(context.Background())
	go s.flusher()
	state := st.State()
	s.turns = state.Turns
	for _, m := range state.Recent {
		s.seen[m.ClientMessageID] = contract.SendMessageResponse{
			ConversationID: s.id, ClientMessageID: m.ClientMessageID, TurnID: m.TurnID, Seq: m.Seq, Duplicate: true,
		}
	}
	if created {
		s.emit(contract.Event{Kind: contract.KindSessionCreated, Session: &contract.SessionEvent{Harness: cfg.harness.Name(), WorkerID: cfg.workerID}})
	} else {
		n := 0
		if recs, err := st.Transcript(); err == nil {
			n = len(recs)
		}
		s.emit(contract.Event{Kind: contract.KindSessionResumed, Session: &contract.SessionEvent{Harness: cfg.harness.Name(), WorkerID: cfg.workerID, Messages: n}})
	}
	for _, n := range cfg.notices {
		s.emit(contract.Event{Kind: contract.KindNotice, Text: n})
	}
	if state.OpenTurn != "" {
		s.emit(contract.Event{Kind: contract.KindTurnFailed, TurnID: state.OpenTurn, Failure: &contract.TurnFailure{
			Code: contract.FailWorkerRestarted, Message: "the worker restarted while this turn was running; send the message again to continue", Retryable: true,
		}})
		s.log.Warn("closed a turn cut off by a restart", "turn", state.OpenTurn)
	}
	return s
}

func (s *session) eventTime() time.Time { return s.cfg.now().UTC() }

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
		ev.Time = s.eventTime()
	}
	if err := s.store.AppendEvent(&ev); err != nil {
		// An event that is not in the log must not be streamed with an id
		// a client could later fail to replay.
		s.log.Error("event not recorded", "kind", ev.Kind, "err", err)
		return
	}
	s.pending = append(s.pending, ev)
	s.wakeFlusher()
}

// wakeFlusher has the flusher sync what was appended; a wake already
// pending covers it.
func (s *session) wakeFlusher() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// flusher makes pending events durable (one fsync for all that have
// accumulated: group commit) and then publishes them in order, so a client
// is never shown an event a crash could still lose. A failed sync holds the
// events back and is retried with backoff. Once close stops it, the flusher
// closes the store (whose last sync is tried once: never a retry loop on a
// store that is going away), publishes what that made durable, ends the
// streams and exits.
func (s *session) flusher() {
	defer close(s.flushed)
	defer s.finish()
	bo := backoff.New(s.cfg.syncRetry)
	for {
		select {
		case <-s.flushCtx.Done():
			return
		case <-s.wake:
		}
		for {
			err := s.flush()
			if err == nil {
				bo.Reset()
				break
			}
			d := bo.Next()
			s.log.Error("session sync failed; events held back until it succeeds", "attempts", bo.Attempts(), "retry_in", d, "err", err)
			if backoff.Sleep(s.flushCtx, d) != nil {
				return
			}
		}
	}
}

// flush syncs the store once and publishes the events it made durable.
// Events appended during the sync have woken the flusher again.
func (s *session) flush() error {
	if err := s.store.Sync(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.publishDurableLocked()
	return nil
}

func (s *session) publishDurableLocked() {
	durable := s.store.DurableSeq()
	n := 0
	for n < len(s.pending) && s.pending[n].Seq <= durable {
		s.publishLocked(s.pending[n])
		n++
	}
	s.pending = append(s.pending[:0], s.pending[n:]...)
}

// finish closes the store: a last sync, a checkpoint, the lease released.
// A failed last sync is logged here, because close may have stopped
// waiting, and kept for close to return; the events it did not make
// durable are never streamed by this worker (the next owner reads whatever
// the files hold).
func (s *session) finish() {
	err := s.store.Close()
	if err != nil {
		s.log.Error("session closed without its last sync; the events not yet streamed may not be durable", "err", err)
	}
	s.mu.Lock()
	if err == nil {
		// A turn that ended just before Shutdown reaches its streams.
		s.publishDurableLocked()
	}
	s.closeSubscribersLocked()
	s.mu.Unlock()
	s.closeErr = err
}

func (s *session) closeSubscribersLocked() {
	for sub := range s.subs {
		close(sub.ch)
		delete(s.subs, sub)
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

// report writes r to the session's outbox and tells the reporter. It
// wakes the flusher too: the reporter syncs before it sends, but without
// one (or before it runs) a report appended after the turn's last event
// would stay unsynced, and the outbox's file open, while the session
// rests.
func (s *session) report(r contract.Report) {
	if _, err := s.store.AppendReport(r); err != nil {
		s.log.Error("report not recorded", "kind", r.Kind, "err", err)
		return
	}
	s.cfg.reporter.Notify(s.store)
	s.wakeFlusher()
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
	s.lastUsed = s.cfg.now()
	return sub
}

func (s *session) unsubscribe(sub *subscriber) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.subs[sub]; ok {
		delete(s.subs, sub)
		close(sub.ch)
	}
	s.lastUsed = s.cfg.now()
}

// idle reports whether the session may be closed: no turn, no stream, no
// report waiting, and unused since before.
// turnRunning reports whether a turn runs.
func (s *session) turnRunning() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running != nil
}

func (s *session) idle(before time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idleLocked(before)
}

// claimIdle marks s closed if it is idle, under the lock a send starts its
// turn under, and reports whether it did: the caller then drops and
// closes s. Checking idle and closing in two steps let a turn start in
// between, on a session whose files were being closed (its events "not
// recorded", the turn failed).
func (s *session) claimIdle(before time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.idleLocked(before) {
		return false
	}
	s.closed = true
	return true
}

// isClosed reports whether s is closed or claimed for closing.
func (s *session) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *session) idleLocked(before time.Time) bool {
	if s.running != nil || len(s.subs) > 0 || len(s.pending) > 0 || !s.lastUsed.Before(before) {
		return false
	}
	p, err := s.store.PendingReports()
	return err == nil && len(p) == 0
}

// close stops the flusher, which closes the store (a last sync, a
// checkpoint, the lease released) and ends the session's streams. It waits
// for the flusher until ctx ends and returns what closing the store
// returned, a failed last sync included. When ctx ends first it ends the
// streams itself and returns ctx's error; the flusher, stuck in an fsync,
// then finishes the close on its own. Calling close again is harmless.
func (s *session) close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stopFlusher()
	select {
	case <-s.flushed:
		return s.closeErr
	case <-ctx.Done():
		s.mu.Lock()
		s.closeSubscribersLocked()
		s.mu.Unlock()
		return fmt.Errorf("session %s: still closing: %w", s.id, ctx.Err())
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

// errSessionClosed is a send that found its session closed since it was
// looked up (idle, or released to spread the load): the sender opens it
// again.
var errSessionClosed = errors.New("session closed")

// errTurnRunning refuses a message while a turn runs.
type errTurnRunning struct{ turnID string }

func (e errTurnRunning) Error() string { return "a turn is running: " + e.turnID }

// send starts a turn for a user message, or returns the turn a previous
// call with the same client message id started.
// parent is the command's context: the turn's span is its span's child.
func (s *session) send(parent context.Context, req contract.SendMessageRequest) (contract.SendMessageResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.seen[req.ClientMessageID]; ok {
		return prev, nil
	}
	if s.closed {
		return contract.SendMessageResponse{}, errSessionClosed
	}
	if s.running != nil {
		return contract.SendMessageResponse{}, errTurnRunning{s.running.id}
	}
	ctx, cancel, err := s.cfg.gate.begin()
	if err != nil {
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
	s.lastUsed = s.cfg.now()

	rt := &runningTurn{id: turnID, cancel: cancel, done: make(chan struct{})}
	// The turn outlives the command; its span is the command's child all
	// the same, and every span of the turn is its child.
	rt.span = trace.SpanFromContext(ctx) // records nothing while tracing is off
	if s.cfg.tracer != nil {
		ctx, rt.span = s.cfg.tracer.Start(trace.ContextWithSpanContext(ctx, trace.SpanContextFromContext(parent)), "turn",
			trace.WithAttributes(observe.Tenant.String(s.cfg.tenant), observe.Env.String(s.cfg.env),
				observe.Conversation.String(s.id), observe.Turn.String(turnID)))
	}
	s.running = rt
	go s.run(ctx, rt, req)
	return resp, nil
}

// run executes one turn and closes it with a terminal event.
func (s *session) run(ctx context.Context, rt *runningTurn, req contract.SendMessageRequest) {
	defer s.cfg.gate.end()
	defer close(rt.done)
	defer rt.cancel()
	log := s.log.With("turn", rt.id)
	start := time.Now()
	meta := s.store.Meta()
	var (
		replyMu sync.Mutex
		reply   replyText // guarded by replyMu: a harness may emit from goroutines of its own
	)
	t := &harness.Turn{
		ConversationID: s.id,
		TurnID:         rt.id,
		UserID:         meta.UserID,
		Text:           req.Text,
		Attachments:    req.Attachments,
		SessionDir:     s.store.Dir(),
		Workspace:      filepath.Join(s.cfg.workspaces, s.id),
		Transcript:     transcript{s.store},
		Jail:           s.jail(),
		Emit: func(ev contract.Event) {
			ev.TurnID = rt.id
			if err := ev.ValidateParent(); err != nil {
				// The event is kept (it is the turn's work); only the
				// nesting a client could not trust is dropped.
				s.log.Warn("harness event with a bad parent tool call", "kind", ev.Kind, "err", err)
				ev.ParentToolUseID = ""
			}
			if ev.Kind == contract.KindMessage && ev.ParentToolUseID == "" {
				replyMu.Lock()
				reply.add(ev.Text)
				replyMu.Unlock()
			}
			s.emit(ev)
		},
		Report: func(r contract.Report) {
			r.ConversationID = s.id
			r.TurnID = rt.id
			if r.Time.IsZero() {
				r.Time = s.eventTime()
			}
			if r.IdempotencyKey == "" {
				r.IdempotencyKey = contract.NewID("r_")
			}
			// The turn id makes the key unique even when the harness's
			// key is not across restarts (the simulator's message ids
			// start again at msg_sim_000001): a reused key would make the
			// control-plane drop a new fact as a duplicate.
			r.IdempotencyKey = s.id + "/" + rt.id + "/" + r.IdempotencyKey
			if r.Traceparent == "" {
				// The harness names the model or tool call's span when it
				// has one; otherwise the report is about the turn.
				r.Traceparent = observe.Traceparent(ctx)
			}
			s.report(r)
		},
	}
	res, err := s.cfg.harness.RunTurn(ctx, t)
	var failure string
	defer func() { observe.End(rt.span, err, failure) }()
	s.mu.Lock()
	if err != nil {
		f := harness.Failure(err)
		if ctx.Err() != nil {
			f = harness.Failure(context.Canceled)
			if s.cfg.gate.closing() {
				// Cut off by the end of the shutdown grace period, not by
				// the user.
				f = contract.TurnFailure{Code: contract.FailWorkerRestarted, Retryable: true,
					Message: "the worker shut down before this turn finished; send the message again to continue"}
			}
		}
		s.emitLocked(contract.Event{Kind: contract.KindTurnFailed, TurnID: rt.id, Failure: &f})
		failure = f.Code
		log.InfoContext(ctx, "turn failed", "code", f.Code, "err", err)
	} else {
		s.emitLocked(contract.Event{Kind: contract.KindTurnFinished, TurnID: rt.id, Finish: &contract.TurnFinish{
			StopReason: res.StopReason, ModelCalls: res.ModelCalls, DurationMS: time.Since(start).Milliseconds(),
		}})
		rt.span.SetAttributes(attribute.String("talkide.turn.stop_reason", res.StopReason), attribute.Int("talkide.turn.model_calls", res.ModelCalls))
		log.InfoContext(ctx, "turn finished", "stop_reason", res.StopReason, "model_calls", res.ModelCalls, "duration", time.Since(start))
	}
	// After the terminal event, before the session is idle: the
	// control-plane dates the conversation's activity by it and indexes
	// the reply for the search, once per turn (the key), whether or not
	// anyone watched the turn.
	replyMu.Lock()
	r := reply.report()
	replyMu.Unlock()
	s.report(contract.Report{Kind: contract.ReportTurnEnded, IdempotencyKey: s.id + "/" + rt.id + "/turn-ended",
		ConversationID: s.id, TurnID: rt.id, Time: s.eventTime(), Reply: &r, Traceparent: observe.Traceparent(ctx)})
	s.running = nil
	s.lastUsed = s.cfg.now()
	s.mu.Unlock()
}

// replyText gathers the main agent's assistant messages of a turn, up to
// contract.MaxReplyText bytes.
type replyText struct {
	b         strings.Builder
	truncated bool
}

func (r *replyText) add(text string) {
	text = strings.TrimSpace(text)
	if text == "" || r.truncated {
		return
	}
	if r.b.Len() > 0 {
		text = "\n\n" + text
	}
	if room := contract.MaxReplyText - r.b.Len(); len(text) > room {
		// Cut at a character boundary.
		for room > 0 && !utf8.RuneStart(text[room]) {
			room--
		}
		text, r.truncated = text[:room], true
	}
	r.b.WriteString(text)
}

func (r *replyText) report() contract.TurnReply {
	return contract.TurnReply{Text: r.b.String(), Truncated: r.truncated}
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
