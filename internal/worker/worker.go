// Package worker is the per-tenant-env agent worker: the signed command API
// the control-plane calls, the session manager that runs one turn at a time
// per conversation through a harness, and the event fan-out.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/sessionstore"
	"github.com/talkide/platform/internal/trust"
)

// Config is what a worker needs. Every field without a stated default is
// required.
type Config struct {
	Tenant   string
	Env      string
	WorkerID string // default: hostname
	// Sessions is $CLAUDE_CONFIG_DIR/projects.
	Sessions *sessionstore.Store
	// WorkspaceRoot holds one working tree per conversation.
	WorkspaceRoot string
	Harness       harness.Harness
	// CommandKeyID and CommandKey verify the control-plane's signed commands
	// (and sign reports).
	CommandKeyID string
	CommandKey   []byte
	// Reporter sends reports to the control-plane; nil drops them.
	Reporter *Reporter
	Logger   *slog.Logger // nil: don't log
	Now      func() time.Time
	// Notice, when set, is emitted as a notice event whenever a session is
	// created or resumed (talkide dev uses it to say that the model is the
	// simulator).
	Notice string
	// IdleTimeout is how long a session with no turn, no stream and no
	// pending report stays open (holding its lease) before it is closed;
	// default 2 minutes. A closed session reopens on the next command.
	IdleTimeout time.Duration
	// Heartbeat is the interval of SSE comments on idle streams; default 15 s.
	Heartbeat time.Duration
}

// Worker serves the command API.
type Worker struct {
	cfg      Config
	log      *slog.Logger
	verifier *trust.Verifier
	// base is the parent context of every turn; cancelled at the end of
	// Shutdown's grace period.
	base       context.Context
	cancelBase context.CancelFunc

	maintDone chan struct{} // closed when the maintenance loop has stopped

	mu sync.Mutex
	// guarded by mu
	sessions map[string]*session
	loading  map[string]*loadingSession // sessions being opened from disk
	closing  bool
	turns    sync.WaitGroup // running turns; Add under mu while !closing
}

// New returns a worker.
func New(cfg Config) (*Worker, error) {
	if cfg.Tenant == "" || cfg.Env == "" || cfg.Sessions == nil || cfg.WorkspaceRoot == "" || cfg.Harness == nil || len(cfg.CommandKey) == 0 || cfg.CommandKeyID == "" {
		return nil, errors.New("worker: Tenant, Env, Sessions, WorkspaceRoot, Harness, CommandKeyID and CommandKey are required")
	}
	if cfg.WorkerID == "" {
		cfg.WorkerID, _ = os.Hostname()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 2 * time.Minute
	}
	if err := os.MkdirAll(cfg.WorkspaceRoot, 0o755); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	key := append([]byte(nil), cfg.CommandKey...)
	lookup := func(tenant, env, kid string) ([]byte, bool) {
		if tenant != cfg.Tenant || env != cfg.Env || kid != cfg.CommandKeyID {
			return nil, false
		}
		return key, true
	}
	w := &Worker{
		cfg:       cfg,
		log:       cfg.Logger.With("tenant", cfg.Tenant, "env", cfg.Env),
		verifier:  trust.NewVerifier(trust.ToWorker, lookup, cfg.Now),
		sessions:  make(map[string]*session),
		loading:   make(map[string]*loadingSession),
		maintDone: make(chan struct{}),
	}
	w.base, w.cancelBase = context.WithCancel(context.Background())
	go w.maintain()
	return w, nil
}

// loadingSession lets concurrent requests for a session wait for one load
// instead of holding the worker's lock while the disk is read.
type loadingSession struct {
	done    chan struct{}
	s       *session
	created bool
	err     error
}

// errShuttingDown refuses new turns during Shutdown.
var errShuttingDown = errors.New("worker is shutting down")

// session returns the open session of id, loading it from disk (and taking
// its lease) if needed. With create it creates a missing session; otherwise
// a missing one is sessionstore.ErrNotFound. A session leased by another
// worker is sessionstore.ErrLeaseHeld.
func (w *Worker) session(id, userID string, create bool) (*session, bool, error) {
	w.mu.Lock()
	if s, ok := w.sessions[id]; ok {
		w.mu.Unlock()
		return s, false, nil
	}
	if w.closing {
		// Shutdown closes the sessions it knows; one opened now would stay
		// open, its log written by a worker that is going away.
		w.mu.Unlock()
		return nil, false, errShuttingDown
	}
	if l, ok := w.loading[id]; ok {
		w.mu.Unlock()
		<-l.done
		if errors.Is(l.err, sessionstore.ErrNotFound) && create {
			return w.session(id, userID, create)
		}
		return l.s, false, l.err
	}
	l := &loadingSession{done: make(chan struct{})}
	w.loading[id] = l
	w.mu.Unlock()

	l.s, l.created, l.err = w.open(id, userID, create)

	w.mu.Lock()
	delete(w.loading, id)
	if l.err == nil {
		if w.closing {
			w.mu.Unlock()
			l.s.close()
			l.s, l.err = nil, errShuttingDown
			close(l.done)
			return nil, false, errShuttingDown
		}
		w.sessions[id] = l.s
	}
	w.mu.Unlock()
	close(l.done)
	return l.s, l.created, l.err
}

func (w *Worker) open(id, userID string, create bool) (*session, bool, error) {
	var st *sessionstore.Session
	var created bool
	var err error
	if create {
		st, created, err = w.cfg.Sessions.Create(id, sessionstore.Meta{UserID: userID, Harness: w.cfg.Harness.Name(), CreatedAt: w.cfg.Now().UTC()})
	} else {
		st, err = w.cfg.Sessions.Load(id)
	}
	if err != nil {
		return nil, false, err
	}
	s, err := openSession(w, st, created)
	if err != nil {
		st.Close()
		return nil, false, err
	}
	if p, err := st.PendingReports(); err == nil && len(p) > 0 {
		w.cfg.Reporter.Notify(st)
	}
	return s, created, nil
}

// maintain renews the leases of open sessions and closes idle ones, until
// Shutdown.
func (w *Worker) maintain() {
	defer close(w.maintDone)
	interval := w.cfg.Sessions.LeaseTTL() / 3
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-w.base.Done():
			return
		case <-t.C:
			w.maintainOnce()
		}
	}
}

func (w *Worker) maintainOnce() {
	w.mu.Lock()
	open := make([]*session, 0, len(w.sessions))
	for _, s := range w.sessions {
		open = append(open, s)
	}
	w.mu.Unlock()
	idleBefore := w.cfg.Now().Add(-w.cfg.IdleTimeout)
	for _, s := range open {
		switch err := s.store.RenewLease(); {
		case errors.Is(err, sessionstore.ErrFenced):
			// Another worker owns the conversation now: stop at once and
			// write nothing more.
			w.log.Error("session lease lost; dropping the session", "conversation", s.id)
			w.drop(s)
			s.mu.Lock()
			rt := s.running
			s.mu.Unlock()
			if rt != nil {
				rt.cancel()
			}
			s.close()
		case err != nil:
			w.log.Warn("session lease renewal failed; will retry", "conversation", s.id, "err", err)
		case s.idle(idleBefore):
			w.drop(s)
			if err := s.close(); err != nil {
				w.log.Warn("closing an idle session failed", "conversation", s.id, "err", err)
			}
		}
	}
}

// drop removes s from the open sessions if it is still there.
func (w *Worker) drop(s *session) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sessions[s.id] == s {
		delete(w.sessions, s.id)
	}
}

// FlushOutboxes opens every session on the volume whose outbox holds reports
// not yet acknowledged, so that reports written before a crash are sent even
// if their conversation is never used again. Sessions leased elsewhere are
// left to their owner.
func (w *Worker) FlushOutboxes() error {
	ids, err := w.cfg.Sessions.WithPendingReports()
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, _, err := w.session(id, "", false); err != nil && !errors.Is(err, sessionstore.ErrLeaseHeld) {
			w.log.Warn("could not open a session to flush its reports", "conversation", id, "err", err)
		}
	}
	return nil
}

func (w *Worker) workspace(id string) string { return filepath.Join(w.cfg.WorkspaceRoot, id) }

// Shutdown stops taking new turns, waits for running turns until ctx ends,
// then interrupts the rest, and closes every session.
func (w *Worker) Shutdown(ctx context.Context) error {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
	done := make(chan struct{})
	go func() { w.turns.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		w.log.Warn("shutdown grace period over; interrupting running turns")
		w.cancelBase()
		<-done
	}
	w.cancelBase()
	// Deliver what the outboxes hold while the sessions are still ours;
	// what does not make it stays in the outbox for the next owner.
	fctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		fctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
	}
	if err := w.cfg.Reporter.Flush(fctx); err != nil {
		w.log.Warn("reports left in the outbox at shutdown", "err", err)
	}
	// Take the sessions out under w.mu but close them without it: session
	// methods lock s.mu and then w.mu (send → beginTurn), so holding w.mu
	// while locking s.mu could deadlock with a concurrent send.
	w.mu.Lock()
	sessions := w.sessions
	w.sessions = make(map[string]*session)
	w.mu.Unlock()
	<-w.maintDone
	var errs []error
	for _, s := range sessions {
		errs = append(errs, s.close())
	}
	return errors.Join(errs...)
}

func (w *Worker) isClosing() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closing
}

// beginTurn registers a turn with the shutdown accounting.
func (w *Worker) beginTurn() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closing {
		return errShuttingDown
	}
	w.turns.Add(1)
	return nil
}

func (w *Worker) newEventTime() time.Time { return w.cfg.Now().UTC() }

// Stats counts the sessions this worker has open and the turns running.
func (w *Worker) Stats() (open, running int) {
	w.mu.Lock()
	sessions := make([]*session, 0, len(w.sessions))
	for _, s := range w.sessions {
		sessions = append(sessions, s)
	}
	w.mu.Unlock()
	for _, s := range sessions {
		s.mu.Lock()
		if s.running != nil {
			running++
		}
		s.mu.Unlock()
	}
	return len(sessions), running
}
