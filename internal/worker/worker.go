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

	mu sync.Mutex
	// guarded by mu
	sessions map[string]*session
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
		cfg:      cfg,
		log:      cfg.Logger.With("tenant", cfg.Tenant, "env", cfg.Env),
		verifier: trust.NewVerifier(trust.ToWorker, lookup, cfg.Now),
		sessions: make(map[string]*session),
	}
	w.base, w.cancelBase = context.WithCancel(context.Background())
	return w, nil
}

// errShuttingDown refuses new turns during Shutdown.
var errShuttingDown = errors.New("worker is shutting down")

// session returns the open session of id, loading it from disk if needed.
// With create it creates a missing session; otherwise a missing one is
// sessionstore.ErrNotFound.
func (w *Worker) session(id, userID string, create bool) (s *session, created bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s, ok := w.sessions[id]; ok {
		return s, false, nil
	}
	if w.closing {
		// Shutdown closes the sessions it knows; one opened now would stay
		// open, its log written by a worker that is going away.
		return nil, false, errShuttingDown
	}
	var st *sessionstore.Session
	if create {
		st, created, err = w.cfg.Sessions.Create(id, sessionstore.Meta{UserID: userID, Harness: w.cfg.Harness.Name(), CreatedAt: w.cfg.Now().UTC()})
	} else {
		st, err = w.cfg.Sessions.Load(id)
	}
	if err != nil {
		return nil, false, err
	}
	s, err = openSession(w, st, created)
	if err != nil {
		st.Close()
		return nil, false, err
	}
	w.sessions[id] = s
	return s, created, nil
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
	// Take the sessions out under w.mu but close them without it: session
	// methods lock s.mu and then w.mu (send → beginTurn), so holding w.mu
	// while locking s.mu could deadlock with a concurrent send.
	w.mu.Lock()
	sessions := w.sessions
	w.sessions = make(map[string]*session)
	w.mu.Unlock()
	var errs []error
	for _, s := range sessions {
		s.closeSubscribers()
		errs = append(errs, s.store.Close())
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
