// Package worker is the per-tenant-env agent worker: the signed command API
// the control-plane calls, the session manager that runs one turn at a time
// per conversation through a harness, and the event fan-out.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/bodyroom"
	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/fdlimit"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/observe"
	"github.com/talkide/platform/internal/replicaset"
	"github.com/talkide/platform/internal/sandbox"
	"github.com/talkide/platform/internal/sessionstore"
	"github.com/talkide/platform/internal/trust"
)

// CommandKey verifies the control-plane's signed commands (and signs
// reports): the key id the signatures name and the tenant-env's key.
type CommandKey struct {
	ID  string
	Key []byte
}

// Options configure a Worker; the zero value of each field means its
// default.
type Options struct {
	// WorkerID names this worker in session events; default: the host name.
	WorkerID string
	// Reporter sends reports to the control-plane; nil leaves them in the
	// outboxes.
	Reporter *Reporter
	Logger   *slog.Logger // nil: don't log
	Now      func() time.Time
	// Notices are emitted as notice events whenever a session is created
	// or resumed: that the model is the simulator, that commands run
	// without a sandbox.
	Notices []string
	// Jail, when set, gives each turn the sandbox its processes start in
	// (harness.Turn.Jail): tools, MCP servers and subprocess harnesses
	// start nothing without one.
	Jail func(conversationID, workspace string) *sandbox.Jail
	// IdleTimeout is how long a session with no turn, no stream and no
	// pending report stays open (holding its lease) before it is closed;
	// default 2 minutes. A closed session reopens on the next command.
	IdleTimeout time.Duration
	// Heartbeat is the interval of SSE comments on idle streams; default 15 s.
	Heartbeat time.Duration
	// SyncRetry paces a session's retries after a failed fsync, while its
	// events are held back; zero fields mean 10 ms growing to 1 s.
	SyncRetry backoff.Policy
	// MaxRunningTurns bounds the turns running at once: a message beyond
	// it is refused before its turn starts (503 worker_busy, Retry-After),
	// so that overload costs a clear refusal and never a turn's events or
	// a session's lease. 0: MaxTurnsFor the process's open-file limit and
	// processors; negative: no bound.
	MaxRunningTurns int
	// CommandKeys, when set, replaces New's key: commands verify with the
	// key their signature's id names while the ring does not retire it,
	// so a rotated key (and its predecessor, for the grace) is taken
	// without a restart.
	CommandKeys *trust.Keyring
	// TracerProvider, when set, traces each command, each turn and each
	// session resumed, continuing the control-plane's trace of a command
	// whose signature verified (docs/observability.md); nil: no spans.
	TracerProvider trace.TracerProvider
	// Replicas, when set, is the registry of this tenant-env's replicas,
	// and Addr the base URL they reach this one at (both or neither): the
	// worker then forwards a verified command about a conversation another
	// replica holds to it, places new conversations on the least loaded
	// replica, lists the whole tenant-env's running turns, and releases
	// idle sessions when it holds clearly more than its share. Without
	// them it serves every command itself (one replica).
	Replicas *replicaset.Registry
	Addr     string
	// Transport carries the commands forwarded to peers; nil: one with a
	// short connect timeout.
	Transport http.RoundTripper
	// RebalanceIdle is how long a session must have gone unused before it
	// is released to spread the load; default DefaultRebalanceIdle.
	RebalanceIdle time.Duration
	// UploadMemory bounds the bytes of attached files held in memory at
	// once, each from its arrival until it is stored: a file beyond it is
	// refused unread (503 too_many_uploads, Retry-After), as the
	// control-plane refuses it beyond its own bound. 0:
	// DefaultUploadMemory; negative: no bound.
	UploadMemory int64
}

// DefaultUploadMemory is the default bound on attached files' bytes held
// at once: six files of the largest size. Every control-plane replica
// bounds its own uploads, so this bounds what several of them send at once.
const DefaultUploadMemory = 64 << 20

// DescriptorsPerTurn is what MaxTurnsFor counts a running turn to hold
// at the most: its session's three logs, the control-plane's event stream,
// a model call through the local proxy (both ends), a sandboxed command's
// pipes, process handles and the egress proxy's connections, with room
// for an MCP server.
const DescriptorsPerTurn = 32

// TurnsPerCPU is how many running turns MaxTurnsFor allows a processor.
// A turn mostly waits for the model, but its commands, its events and
// their streams take processor time, and a worker given more turns than
// its processors carry starves its own maintenance: on 2 processors, 468
// turns at once each running a sandboxed command made lease renewals
// late enough that the worker lost its own sessions' leases; 64 ran
// every turn to its end.
const TurnsPerCPU = 32

// MaxTurnsFor is the bound on running turns that the open-file limit
// nofile and cpus processors allow: a quarter of the descriptors are kept
// for idle sessions, the listeners and the control-plane's connections;
// at least 1.
func MaxTurnsFor(nofile uint64, cpus int) int {
	return max(1, min(int(nofile*3/4/DescriptorsPerTurn), TurnsPerCPU*cpus))
}

// Defaults of Options.
const (
	DefaultIdleTimeout = 2 * time.Minute
	DefaultHeartbeat   = 15 * time.Second
)

// sessionCloseTimeout bounds how long closing a session waits for its last
// fsync: a hung disk must not hang Shutdown or the maintenance loop.
const sessionCloseTimeout = 10 * time.Second

// Worker serves the command API.
type Worker struct {
	store    *sessionstore.Store
	opts     Options
	log      *slog.Logger
	verifier *trust.Verifier
	// scfg is what every session of this worker is given.
	scfg *sessionConfig
	// base is the parent context of every turn and of the maintenance loop;
	// cancelled at the end of Shutdown's grace period.
	base       context.Context
	cancelBase context.CancelFunc
	// gate admits turns until Shutdown closes it.
	gate *turnGate

	maintDone chan struct{} // closed when the maintenance loop has stopped

	// router routes commands among the replicas; nil: one replica.
	router *router

	// uploads is the room for attached files' bytes (UploadMemory).
	uploads *bodyroom.Room

	// Counted for Load: how the commands this replica answered went, and
	// the sessions it gave up for another replica to take.
	commands, refusedBusy, elsewhere    atomic.Int64
	forwardedHolder, forwardedPlacement atomic.Int64
	releasedRebalance, releasedDrain    atomic.Int64

	mu sync.Mutex
	// guarded by mu
	sessions map[string]*session
	loading  map[string]*loadingSession // sessions being opened from disk
}

// New returns the worker of tenant-env (tenant, env). It verifies commands
// with key, keeps sessions in sessions, the conversations' working trees
// under workspaces (created if missing), and runs turns with h. A missing
// required argument is an error.
func New(tenant, env string, key CommandKey, sessions *sessionstore.Store, workspaces string, h harness.Harness, opts *Options) (*Worker, error) {
	var missing []string
	for name, ok := range map[string]bool{
		"tenant": tenant != "", "env": env != "", "command key id": key.ID != "", "command key": len(key.Key) > 0,
		"session store": sessions != nil, "workspace root": workspaces != "", "harness": h != nil,
	} {
		if !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("worker: missing %s", strings.Join(missing, ", "))
	}
	o := withDefaults(opts)
	if (o.Replicas == nil) != (o.Addr == "") {
		return nil, errors.New("worker: Replicas and Addr go together")
	}
	if err := os.MkdirAll(workspaces, 0o755); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	ring := o.CommandKeys
	if ring == nil {
		var err error
		if ring, err = trust.NewKeyring(key.ID, map[string][]byte{key.ID: key.Key}); err != nil {
			return nil, fmt.Errorf("worker: command key: %w", err)
		}
	}
	lookup := func(t, e, kid string) ([]byte, bool) {
		if t != tenant || e != env {
			return nil, false
		}
		secret, err := ring.Verifying(kid, o.Now())
		return secret, err == nil
	}
	w := &Worker{
		store: sessions, opts: o,
		log:       o.Logger.With("tenant", tenant, "env", env),
		verifier:  trust.NewVerifier(trust.ToWorker, lookup, o.Now),
		sessions:  make(map[string]*session),
		loading:   make(map[string]*loadingSession),
		maintDone: make(chan struct{}),
		uploads:   bodyroom.New(o.UploadMemory, 0),
	}
	if o.Replicas != nil {
		w.router = newRouter(o.Replicas, o.Addr, o.Transport)
	}
	w.base, w.cancelBase = context.WithCancel(context.Background())
	w.gate = newTurnGate(w.base, max(o.MaxRunningTurns, 0))
	w.scfg = &sessionConfig{
		gate: w.gate, harness: h, reporter: o.Reporter, log: w.log, now: o.Now,
		workerID: o.WorkerID, notices: o.Notices, jail: o.Jail, workspaces: workspaces, syncRetry: o.SyncRetry,
		tracer: observe.Tracer(o.TracerProvider, "worker"), tenant: tenant, env: env,
	}
	go w.maintain()
	return w, nil
}

// withDefaults copies opts and fills in the defaults.
func withDefaults(opts *Options) Options {
	o := defaults.Copy(opts)
	if o.WorkerID == "" {
		o.WorkerID, _ = os.Hostname()
	}
	defaults.Logger(&o.Logger)
	defaults.Clock(&o.Now)
	defaults.IfNotPositive(&o.Heartbeat, DefaultHeartbeat)
	if o.MaxRunningTurns == 0 {
		if nofile, err := fdlimit.Current(); err == nil {
			// GOMAXPROCS follows the container's CPU limit.
			o.MaxRunningTurns = MaxTurnsFor(nofile, runtime.GOMAXPROCS(0))
		}
	}
	defaults.IfNotPositive(&o.IdleTimeout, DefaultIdleTimeout)
	defaults.IfNotPositive(&o.RebalanceIdle, DefaultRebalanceIdle)
	defaults.IfZero(&o.UploadMemory, DefaultUploadMemory)
	defaults.IfNotPositive(&o.SyncRetry.Base, 10*time.Millisecond)
	defaults.IfNotPositive(&o.SyncRetry.Max, time.Second)
	return o
}

// loadingSession lets concurrent requests for a session wait for one load
// instead of holding the worker's lock while the disk is read.
type loadingSession struct {
	done    chan struct{}
	s       *session
	created bool
	err     error
}

// session returns the open session of id, loading it from disk (and taking
// its lease) if needed. With create it creates a missing session; otherwise
// a missing one is sessionstore.ErrNotFound. A session leased by another
// worker is sessionstore.ErrLeaseHeld. ctx bounds the wait for a load
// another request started.
func (w *Worker) session(ctx context.Context, id, userID string, create bool) (*session, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	w.mu.Lock()
	if s, ok := w.sessions[id]; ok {
		w.mu.Unlock()
		if !s.isClosed() {
			return s, false, nil
		}
		// Claimed for closing: open it anew once its closer is done with
		// its files (a last sync, the lease released).
		select {
		case <-s.flushed:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
		w.drop(s)
		return w.session(ctx, id, userID, create)
	}
	if w.gate.closing() {
		// Shutdown closes the sessions it knows; one opened now would stay
		// open, its log written by a worker that is going away.
		w.mu.Unlock()
		return nil, false, errShuttingDown
	}
	if l, ok := w.loading[id]; ok {
		w.mu.Unlock()
		select {
		case <-l.done:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
		if errors.Is(l.err, sessionstore.ErrNotFound) && create {
			return w.session(ctx, id, userID, create)
		}
		return l.s, false, l.err
	}
	l := &loadingSession{done: make(chan struct{})}
	w.loading[id] = l
	w.mu.Unlock()

	l.s, l.created, l.err = w.open(ctx, id, userID, create)

	w.mu.Lock()
	delete(w.loading, id)
	if l.err == nil {
		// Checked under w.mu: Shutdown closes the gate before it takes the
		// sessions out, so a session added here is one it will close.
		if w.gate.closing() {
			w.mu.Unlock()
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionCloseTimeout)
			l.s.close(cctx)
			cancel()
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

// open reads the session of id from disk (or creates it) and takes its
// lease. The store's calls do not take a context: they are bounded by the
// disk, and an open half done would leave the lease taken; ctx is only
// the parent of its span.
func (w *Worker) open(ctx context.Context, id, userID string, create bool) (_ *session, _ bool, err error) {
	_, span := observe.Start(ctx, w.scfg.tracer, "session open",
		trace.WithAttributes(observe.Conversation.String(id), observe.Tenant.String(w.scfg.tenant), observe.Env.String(w.scfg.env)))
	defer func() { observe.End(span, err, sessionErrType(err)) }()
	var st *sessionstore.Session
	var created bool
	if create {
		st, created, err = w.store.Create(id, sessionstore.Meta{UserID: userID, Harness: w.scfg.harness.Name(), CreatedAt: w.opts.Now().UTC()})
	} else {
		st, err = w.store.Load(id)
	}
	if err != nil {
		return nil, false, err
	}
	s := openSession(w.scfg, st, created)
	if !created {
		span.SetName("session resume")
	}
	if p, err := st.PendingReports(); err == nil && len(p) > 0 {
		w.opts.Reporter.Notify(st)
	}
	return s, created, nil
}

// maintain renews the leases of open sessions and closes idle ones, until
// Shutdown.
func (w *Worker) maintain() {
	defer close(w.maintDone)
	interval := w.store.LeaseTTL() / 3
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-w.base.Done():
			return
		case <-t.C:
			w.maintainOnce(w.base)
			w.spread(w.base)
		}
	}
}

// openSessions is the sessions open now, to act on without holding w.mu.
func (w *Worker) openSessions() []*session {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Collect(maps.Values(w.sessions))
}

func (w *Worker) maintainOnce(ctx context.Context) {
	open := w.openSessions()
	// A session this loop starts closing is closed even when Shutdown
	// cancels ctx meanwhile: Shutdown waits for this loop, not for the
	// sessions it no longer finds open.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionCloseTimeout)
	defer cancel()
	idleBefore := w.opts.Now().Add(-w.opts.IdleTimeout)
	// The leases nearest their end first, and only those renewed more than
	// a sixth of a lease ago (a session opened since the last pass needs
	// none); side by side, because under load each renewal's few system
	// calls wait behind the turns' work for the processor, and thousands
	// renewed one after the other took longer than a lease lives (a worker
	// under load lost its own sessions' leases and fenced off their
	// events).
	ends := make(map[*session]time.Time, len(open))
	for _, s := range open {
		ends[s] = s.store.LeaseExpires()
	}
	slices.SortFunc(open, func(a, b *session) int { return ends[a].Compare(ends[b]) })
	sideBySide(open, func(s *session) { w.maintainSession(cctx, s, idleBefore) })
}

// sideBySide runs f on each session, renewers at a time, and returns when
// all are done.
func sideBySide(sessions []*session, f func(*session)) {
	var wg sync.WaitGroup
	work := make(chan *session)
	for range min(renewers, len(sessions)) {
		wg.Go(func() {
			for s := range work {
				f(s)
			}
		})
	}
	for _, s := range sessions {
		work <- s
	}
	close(work)
	wg.Wait()
}

// renewers is how many lease renewals the maintenance loop runs at once:
// their time is mostly waiting (for the disk, for a processor), not work.
const renewers = 64

// maintainSession renews s's lease, and closes s when another worker has
// taken it or it has been idle since before idleBefore.
func (w *Worker) maintainSession(cctx context.Context, s *session, idleBefore time.Time) {
	switch err := s.store.RenewLeaseIfDue(); {
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
		s.close(cctx) // a failure is logged by the session
	case err != nil:
		w.log.Warn("session lease renewal failed; will retry", "conversation", s.id, "err", err)
	case s.claimIdle(idleBefore):
		w.drop(s)
		s.close(cctx) // a failure is logged by the session
	case !s.turnRunning():
		// Between turns a session holds no open file: the next event
		// reopens its log.
		s.store.Rest()
	}
}

// MaxRunningTurns is the bound on running turns in force; 0: none.
func (w *Worker) MaxRunningTurns() int { return w.gate.max }

// LoadStats is what a replica tells its operator (and an autoscaler) about its
// load: counts only, never a conversation's id.
type LoadStats struct {
	// RunningTurns is how many turns run now, MaxRunningTurns the bound
	// (0: none).
	RunningTurns, MaxRunningTurns int
	// OpenSessions is how many conversations this replica holds open (and
	// leased) now.
	OpenSessions int
	// Commands counts the signed commands answered since the start;
	// RefusedBusy those refused with worker_busy, Elsewhere those answered
	// session_elsewhere because another replica holds the conversation
	// (or its holder could not be reached).
	Commands, RefusedBusy, Elsewhere int64
	// ForwardedHolder counts the commands forwarded to the replica holding
	// their conversation, ForwardedPlacement those forwarded to place a
	// conversation nobody held on a less loaded replica.
	ForwardedHolder, ForwardedPlacement int64
	// ReleasedRebalance counts the idle sessions given up to spread the
	// load over the replicas, ReleasedDrain those handed over at a drain.
	ReleasedRebalance, ReleasedDrain int64
}

// Load returns the replica's load now.
func (w *Worker) Load() LoadStats {
	w.gate.mu.Lock()
	running := w.gate.running
	w.gate.mu.Unlock()
	w.mu.Lock()
	open := len(w.sessions)
	w.mu.Unlock()
	return LoadStats{
		RunningTurns: running, MaxRunningTurns: w.gate.max, OpenSessions: open,
		Commands: w.commands.Load(), RefusedBusy: w.refusedBusy.Load(), Elsewhere: w.elsewhere.Load(),
		ForwardedHolder: w.forwardedHolder.Load(), ForwardedPlacement: w.forwardedPlacement.Load(),
		ReleasedRebalance: w.releasedRebalance.Load(), ReleasedDrain: w.releasedDrain.Load(),
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
// left to their owner. It stops early, with ctx's error, when ctx ends.
func (w *Worker) FlushOutboxes(ctx context.Context) error {
	ids, err := w.store.WithPendingReports()
	if err != nil {
		return err
	}
	for _, id := range ids {
		_, _, err := w.session(ctx, id, "", false)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && !errors.Is(err, sessionstore.ErrLeaseHeld):
			w.log.Warn("could not open a session to flush its reports", "conversation", id, "err", err)
		}
	}
	return nil
}

// Shutdown stops taking new turns, hands the conversations with no running
// turn over at once and each other one as soon as its turn has ended
// (handOverIdle), waits for running turns until ctx ends, then interrupts
// the rest, and closes every session. Closing a session
// waits for its last fsync, bounded by sessionCloseTimeout rather than by
// ctx: the grace period is for turns, and a session closed without its
// final sync would lose what a client has not yet been shown.
func (w *Worker) Shutdown(ctx context.Context) error {
	idle := w.gate.close()
	if w.router != nil {
		// At once, not at the next beat: no peer places a conversation
		// here any more.
		if err := w.router.replicas.Publish(w.ReplicaEntry); err != nil {
			w.log.Warn("could not mark this replica draining in the registry", "err", err)
		}
	}
	handedOver := []error{w.handOverIdle(ctx)}
	for waiting := true; waiting; {
		select {
		case <-idle:
			waiting = false
		case <-w.gate.turnEnded():
			if ctx.Err() != nil {
				continue // the grace is over: the next pass interrupts the turns
			}
			// That conversation goes now, not once the replica's longest
			// turn has ended.
			handedOver = append(handedOver, w.handOverIdle(ctx))
		case <-ctx.Done():
			w.log.Warn("shutdown grace period over; interrupting running turns")
			w.cancelBase()
			<-idle
			waiting = false
		}
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
	if err := w.opts.Reporter.Flush(fctx); err != nil {
		w.log.Warn("reports left in the outbox at shutdown", "err", err)
	}
	w.mu.Lock()
	sessions := w.sessions
	w.sessions = make(map[string]*session)
	w.mu.Unlock()
	<-w.maintDone
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionCloseTimeout)
	defer cancel()
	errs := handedOver
	for _, s := range sessions {
		errs = append(errs, s.close(cctx))
	}
	if w.router != nil {
		// The forwards have ended with w.base: no connection to a peer
		// outlives the worker.
		if t, ok := w.router.transport.(interface{ CloseIdleConnections() }); ok {
			t.CloseIdleConnections()
		}
	}
	return errors.Join(errs...)
}

// handOverIdle closes, at the start of a drain and after each turn that
// ends during it, every session with no running turn, which releases its
// lease: another replica takes such a conversation over at its next
// command rather than answering session_elsewhere until this one's
// longest turn has ended (a rolling update, a scale-down or a node drain
// would otherwise make every conversation of the replica wait for its
// busiest). The gate is closed first, so none of these sessions starts a
// turn meanwhile (a turn begins under its session's lock, where
// turnRunning looks). Their reports are delivered first, briefly; what is
// left stays in their outboxes. It returns what closing them returned.
func (w *Worker) handOverIdle(ctx context.Context) error {
	var idle []*session
	for _, s := range w.openSessions() {
		if !s.turnRunning() {
			idle = append(idle, s)
		}
	}
	if len(idle) == 0 {
		return nil
	}
	fctx, cancel := context.WithTimeout(ctx, handOverFlush)
	defer cancel()
	if err := w.opts.Reporter.Flush(fctx); err != nil {
		w.log.Warn("reports left in the outbox at a drain", "err", err)
	}
	// What is still undelivered goes with the conversation: its next
	// holder delivers it when it opens it, and every replica's start-up
	// sweep does. Keeping the session for the drain's final flush instead
	// held a conversation for up to half a minute under load (thousands
	// of outboxes delivered one after another at the end), which its user
	// feels; a report arriving later is felt by no one.
	for _, s := range idle {
		w.drop(s)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionCloseTimeout)
	defer cancel()
	// Side by side, as the renewals are: each close waits for a last sync.
	var mu sync.Mutex
	var errs []error
	sideBySide(idle, func(s *session) {
		if err := s.close(cctx); err != nil { // also logged by the session
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	})
	w.releasedDrain.Add(int64(len(idle)))
	w.log.Info("draining: idle conversations handed over", "sessions", len(idle))
	return errors.Join(errs...)
}

// handOverFlush bounds the delivery of reports before idle sessions are
// handed over at a drain.
const handOverFlush = 2 * time.Second

// sessionErrType is the kind of a session open's failure, for its span.
func sessionErrType(err error) string {
	switch {
	case errors.Is(err, sessionstore.ErrNotFound):
		return "not_found"
	case errors.Is(err, sessionstore.ErrLeaseHeld):
		return "lease_held"
	}
	return ""
}

// TurnSpan is the span of the turn conversation id runs now: what the
// local proxy makes the parent of that turn's model calls. It is invalid
// when no turn runs there or tracing is off.
func (w *Worker) TurnSpan(id string) trace.SpanContext {
	w.mu.Lock()
	s := w.sessions[id]
	w.mu.Unlock()
	if s == nil {
		return trace.SpanContext{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil {
		return trace.SpanContext{}
	}
	return s.running.span.SpanContext()
}
