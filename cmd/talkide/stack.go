package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/talkide/platform/internal/auth"
	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/fdlimit"
	"github.com/talkide/platform/internal/gateway"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/harness/claudecode"
	"github.com/talkide/platform/internal/harness/native"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/localproxy"
	"github.com/talkide/platform/internal/mcp/issuetracking"
	mcpservers "github.com/talkide/platform/internal/mcp/servers"
	"github.com/talkide/platform/internal/mcp/workermcp"
	"github.com/talkide/platform/internal/metrics"
	"github.com/talkide/platform/internal/minting"
	"github.com/talkide/platform/internal/readiness"
	"github.com/talkide/platform/internal/sandbox"
	"github.com/talkide/platform/internal/sessionstore"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/postgres"
	"github.com/talkide/platform/internal/store/sqlite"
	"github.com/talkide/platform/internal/tools"
	"github.com/talkide/platform/internal/trust"
	"github.com/talkide/platform/internal/webui"
	"github.com/talkide/platform/internal/worker"
)

// server is an http.Server on its own listener.
type server struct {
	srv *http.Server
	ln  net.Listener
}

// listen serves h on addr.
func listen(addr string, h http.Handler) (*server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	// Connections beyond the open-file limit less a reserve are told 503
	// and closed at once, so that accept never meets EMFILE while the
	// process still has descriptors for the work it has taken on
	// (docs/operations.md).
	if limit, err := fdlimit.Current(); err == nil {
		ln = fdlimit.Listen(ln, fdlimit.MaxConns(limit))
	}
	// A client has 10 s for a request's headers (and the control-plane and
	// the worker give it httpapi.DefaultBodyTimeout for its body); a
	// keep-alive connection idle for 2 minutes is closed, which without
	// an IdleTimeout (or a ReadTimeout, which would cut event streams off)
	// would stay open for as long as the client liked.
	const headerTimeout, idleTimeout = 10 * time.Second, 2 * time.Minute
	s := &server{srv: &http.Server{Handler: h, ReadHeaderTimeout: headerTimeout, IdleTimeout: idleTimeout}, ln: ln}
	go s.srv.Serve(ln)
	return s, nil
}

// shutdown stops accepting and lets the requests being served end, until
// ctx is done (its grace is over); then it closes what is left (an SSE
// stream never ends on its own).
func (s *server) shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if graceOver(err) {
		err = s.close()
	}
	return err
}

// close closes the listener and every connection at once.
func (s *server) close() error { return s.srv.Close() }

func (s *server) url() string { return "http://" + s.ln.Addr().String() }

// cpOptions configure a control-plane process.
type cpOptions struct {
	listen      string
	database    string // --database: see openStore; empty means SQLite at dbPath
	dbPath      string
	secretsPath string
	upstream    string // Anthropic API base URL (or the simulator's)
	apiKey      string
	prices      string // JSON file of price overrides (docs/budgets.md); empty: the built-in prices
	// operatorTokens is the file of operator token hashes the operator API
	// checks (talkide admin operator-token); empty: operator-tokens beside
	// the secrets file.
	operatorTokens string
	localUser      string
	tenant, env    string
	streams        streamFlags
	// maxBody and maxBuffered bound the gateway's request bodies (0: its
	// defaults).
	maxBody, maxBuffered int64
	logger               *slog.Logger
	// internalListen and metricsListen, when set, serve the internal
	// endpoints (gateway, mint, worker reports and issues, operator API)
	// and /metrics on listeners of their own; listen then answers 404 for
	// them (docs/accounts.md).
	internalListen, metricsListen string
	auth                          authFlags
	// shareInterval and shareTTL pace the sharing of stream counts on
	// PostgreSQL (0: the control-plane's defaults); tests shorten them.
	shareInterval, shareTTL time.Duration
}

type cpProc struct {
	http     *server            // the public listener (everything, when not split)
	internal *server            // nil unless --internal-listen
	metricsL *server            // nil unless --metrics-listen
	stop     context.CancelFunc // ends the session sweeper
	store    store.Store
	secrets  *cpSecrets
	budget   *budget.Service
	gateway  *gateway.Gateway // nil without an API key
	metrics  *metrics.Metrics
	server   *controlplane.Server
	// stopSharing ends the sharing of stream counts and waits for it
	// (nil when the store is SQLite, which one process opens).
	stopSharing func()
}

func startControlPlane(ctx context.Context, o cpOptions) (*cpProc, error) {
	secrets, err := loadOrCreateSecrets(o.secretsPath)
	if err != nil {
		return nil, err
	}
	keyring, err := secrets.keyring()
	if err != nil {
		return nil, err
	}
	if o.operatorTokens == "" {
		o.operatorTokens = filepath.Join(filepath.Dir(o.secretsPath), "operator-tokens")
	}
	operators, err := controlplane.NewOperatorTokens(o.operatorTokens, &controlplane.OperatorTokensOptions{Logger: o.logger.With("component", "operator-api")})
	if err != nil {
		return nil, fmt.Errorf("--operator-tokens: %w", err)
	}
	prices, err := loadPrices(o.prices)
	if err != nil {
		return nil, err
	}
	st, err := openStore(ctx, o.database, o.dbPath, o.logger)
	if err != nil {
		return nil, err
	}
	// The control-plane's own registry, not the global default one.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg, &metrics.Options{Prices: prices})
	bud, err := startBudget(st, prices, m, o)
	if err != nil {
		st.Close()
		return nil, err
	}
	var (
		gw        *gateway.Gateway
		gwHandler http.Handler // without a gateway a nil interface, not a nil *Gateway
	)
	if o.apiKey != "" {
		up, err := url.Parse(o.upstream)
		if err != nil || up.Scheme == "" || up.Host == "" {
			closeBudget(bud)
			st.Close()
			return nil, fmt.Errorf("bad Anthropic API URL %q", o.upstream)
		}
		gw = gateway.New(up, o.apiKey, keyring, st, &gateway.Options{Logger: o.logger.With("component", "gateway"), Budget: bud, Metrics: m,
			MaxBody: o.maxBody, MaxBuffered: o.maxBuffered})
		gwHandler = gw
	}
	var authn *auth.Authenticator
	if o.localUser == "" {
		if authn, err = o.auth.authenticator(st, secrets, o.logger.With("component", "auth")); err != nil {
			closeBudget(bud)
			st.Close()
			return nil, err
		}
	}
	cp, err := controlplane.New(st,
		controlplane.Keys{Tokens: keyring, Commands: secrets.commands},
		controlplane.TenantEnv{Tenant: o.tenant, Env: o.env}, &controlplane.Options{
			Gateway: gwHandler, LocalUser: o.localUser, Auth: authn, UI: webui.Handler(),
			Logger:            o.logger.With("component", "controlplane"),
			Budget:            bud,
			Operators:         operators,
			Metrics:           promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(o.logger.Handler(), slog.LevelWarn)}),
			StreamMetrics:     m,
			MaxStreamsPerUser: o.streams.perUser, MaxStreamsPerConversation: o.streams.perConversation, MaxStreams: o.streams.total,
			StreamCounts: sharedStreamCounts(st), StreamShareInterval: o.shareInterval, StreamShareTTL: o.shareTTL,
		})
	if err != nil {
		closeBudget(bud)
		st.Close()
		return nil, err
	}
	p := &cpProc{store: st, secrets: secrets, budget: bud, gateway: gw, metrics: m, server: cp}
	if err := p.listen(cp, o); err != nil {
		closeBudget(bud)
		st.Close()
		return nil, err
	}
	m.CountStreams(cp.StreamsOpen, cp.StreamUpstreams)
	lim := cp.StreamLimits()
	shared := sharedStreamCounts(st) != nil
	o.logger.Info("browser stream caps", "per_user", lim.PerUser, "per_conversation", lim.PerConversation, "total", lim.Total,
		"across_replicas", shared, "replica", cp.ReplicaID())
	sweepCtx, stop := context.WithCancel(context.Background())
	p.stop = stop
	if shared {
		shareCtx, stopShare := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			cp.ShareStreamCounts(shareCtx)
		}()
		p.stopSharing = func() { stopShare(); <-done }
	}
	// A rotation written to the secrets file takes effect without a restart.
	if err := secrets.watch(sweepCtx, o.secretsPath, o.logger.With("component", "keys")); err != nil {
		o.logger.Warn("the secrets file is not watched: a key rotation needs a restart", "err", err)
	}
	if authn != nil {
		go sweepSessions(sweepCtx, authn, time.Hour, o.logger.With("component", "auth"))
	}
	return p, nil
}

// listen starts the control-plane's listeners: one for everything, or the
// public one apart from the internal and metrics ones that are set.
func (p *cpProc) listen(cp *controlplane.Server, o cpOptions) error {
	public := controlplane.Public
	if o.internalListen == "" {
		public |= controlplane.Internal
	}
	if o.metricsListen == "" {
		public |= controlplane.Metrics
	}
	var err error
	if p.http, err = listen(o.listen, cp.HandlerFor(public)); err != nil {
		return err
	}
	p.http.srv.RegisterOnShutdown(cp.CloseStreams)
	if fl, ok := p.http.ln.(*fdlimit.Listener); ok {
		p.metrics.CountShedConnections(fl.Shed)
	}
	if o.internalListen != "" {
		if p.internal, err = listen(o.internalListen, cp.HandlerFor(controlplane.Internal)); err != nil {
			p.http.close()
			return fmt.Errorf("--internal-listen: %w", err)
		}
	}
	if o.metricsListen != "" {
		if p.metricsL, err = listen(o.metricsListen, cp.HandlerFor(controlplane.Metrics)); err != nil {
			p.http.close()
			if p.internal != nil {
				p.internal.close()
			}
			return fmt.Errorf("--metrics-listen: %w", err)
		}
	}
	return nil
}

// loadPrices returns the built-in prices with the operator's overrides from
// the file at path, if any (--prices).
func loadPrices(path string) (*budget.Prices, error) {
	prices := budget.DefaultPrices()
	if path == "" {
		return prices, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--prices: %w", err)
	}
	if prices, err = prices.Override(b); err != nil {
		return nil, fmt.Errorf("--prices %s: %w", path, err)
	}
	return prices, nil
}

// startBudget starts the budget service on the control-plane's store; its
// settlements are counted in m. It runs with or without a gateway: the
// operator API sets limits and reports usage either way.
func startBudget(st store.Store, prices *budget.Prices, m *metrics.Metrics, o cpOptions) (*budget.Service, error) {
	bst, ok := st.(budget.Store)
	if !ok {
		return nil, fmt.Errorf("the store %T keeps no budgets", st)
	}
	svc := budget.New(bst, prices, &budget.Options{Logger: o.logger.With("component", "budget"), Settled: m.Settled})
	m.CountReservations(svc.Reservations)
	return svc, nil
}

// closeBudget stops a budget service that never served.
func closeBudget(b *budget.Service) {
	if b != nil {
		b.Close(context.Background())
	}
}

// database is a parsed --database: a PostgreSQL URL or a SQLite file.
type database struct {
	postgresURL string
	sqlitePath  string
}

// parseDatabase reads a --database spec: a postgres:// or postgresql://
// URL is PostgreSQL; sqlite:PATH, sqlite://PATH or a plain file path is
// SQLite; an empty spec is SQLite at defaultPath.
func parseDatabase(spec, defaultPath string) (database, error) {
	scheme, rest, isURL := strings.Cut(spec, "://")
	switch {
	case isURL && (strings.EqualFold(scheme, "postgres") || strings.EqualFold(scheme, "postgresql")):
		return database{postgresURL: spec}, nil
	case isURL && strings.EqualFold(scheme, "sqlite"):
		return database{sqlitePath: rest}, nil
	case isURL:
		return database{}, fmt.Errorf("--database: unknown scheme %q: want postgres://, postgresql://, sqlite:PATH or a file path", scheme)
	case spec == "":
		return database{sqlitePath: defaultPath}, nil
	}
	return database{sqlitePath: strings.TrimPrefix(spec, "sqlite:")}, nil
}

// sharedStreamCounts returns st's stream counts when replicas share st
// (PostgreSQL), nil for SQLite, which one process opens: counting there
// would only cost writes.
func sharedStreamCounts(st store.Store) store.StreamCounts {
	if pg, ok := st.(*postgres.Store); ok {
		return pg
	}
	return nil
}

// openStore opens the control-plane's store named by spec (parseDatabase).
func openStore(ctx context.Context, spec, defaultPath string, logger *slog.Logger) (store.Store, error) {
	db, err := parseDatabase(spec, defaultPath)
	if err != nil {
		return nil, err
	}
	if db.postgresURL != "" {
		return openPostgres(ctx, db.postgresURL, logger)
	}
	return sqlite.Open(ctx, db.sqlitePath, &sqlite.Options{Logger: logger})
}

// dbWait is how long a control-plane waits for PostgreSQL at start.
const dbWait = 2 * time.Minute

// openPostgres opens the store, waiting for the database for up to dbWait
// and saying why at every try: a control-plane started together with its
// database (a cluster coming up, a node restarting both) waits for it
// rather than exiting, which would cost it a crash-loop back-off of
// minutes once the database is there.
func openPostgres(ctx context.Context, url string, logger *slog.Logger) (store.Store, error) {
	wctx, cancel := context.WithTimeout(ctx, dbWait)
	defer cancel()
	b := backoff.New(backoff.Policy{Base: 250 * time.Millisecond, Max: 5 * time.Second})
	for {
		st, err := postgres.Open(wctx, url, &postgres.Options{Logger: logger})
		if err == nil {
			return st, nil
		}
		if ctx.Err() != nil || wctx.Err() != nil {
			return nil, err
		}
		d := b.Next()
		logger.Warn("waiting for the database", "err", err, "retry_in", d)
		if backoff.Sleep(wctx, d) != nil {
			return nil, err
		}
	}
}

func (p *cpProc) shutdown(ctx context.Context) error {
	if p.stop != nil {
		p.stop()
	}
	var err error
	for _, srv := range []*server{p.http, p.internal, p.metricsL} {
		if srv == nil {
			continue
		}
		err = errors.Join(err, srv.shutdown(ctx))
	}
	// The last usage records and settlements, before the store closes,
	// even when the HTTP shutdown used up ctx.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	// The streams have ended: the other replicas stop counting this one's
	// now rather than after the TTL.
	if p.stopSharing != nil {
		p.stopSharing()
		err = errors.Join(err, p.server.WithdrawStreamCounts(bctx))
	}
	if p.gateway != nil {
		err = errors.Join(err, p.gateway.Close(bctx))
	}
	if p.budget != nil {
		err = errors.Join(err, p.budget.Close(bctx))
	}
	return errors.Join(err, p.store.Close())
}

// graceOver reports whether a server's Shutdown returned because its grace
// period ended with requests still open: by its timeout, or cut short (a
// second Ctrl-C of talkide dev cancels it). Either way the shutdown goes
// on by closing what is left; it is no failure of the command's.
func graceOver(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// workerOptions configure a worker process.
type workerOptions struct {
	listen      string
	tenant, env string
	cpURL       string // TALKIDE_GATEWAY_BASE_URL
	identity    func() (string, error)
	// identityReadable, when set, says whether the token's file is still
	// readable (the readiness probe's "token readable").
	identityReadable func() error
	commandKeyID     string
	commandKey       []byte
	// commandKeys, when set, replaces commandKeyID and commandKey: the
	// keys of a watched key file, rotating without a restart.
	commandKeys     *trust.Keyring
	commandKeyGrace time.Duration
	claudeConfigDir string
	workspaceRoot   string
	model           string
	toolPolicy      string // path of a tool policy JSON file (docs/tools.md); empty allows every call
	harness         string // native (default) or claude-code (docs/harnesses.md)
	claudeCodeBin   string // the claude executable, for --harness claude-code
	mcpAllow        string // path of the MCP server allow-list (docs/mcp.md); empty allows no .mcp.json server
	notices         []string
	sandbox         sandbox.Mode // default auto
	sandboxReadOnly []string     // nil: sandbox.DefaultReadOnly
	sandboxHelper   string       // empty: talkide-sandbox beside the executable, or the executable itself
	egressAllow     string       // the egress allow-list file; empty allows no destination
	builds          buildFlags   // the Build tool's runner (builds.go)
	// pretendNoLandlock makes the sandbox find no Landlock (tests of a
	// machine without it).
	pretendNoLandlock bool
	workerID          string        // names the worker in session leases; default host-pid
	leaseTTL          time.Duration // session lease lifetime; default sessionstore.DefaultLeaseTTL
	logger            *slog.Logger
}

type workerProc struct {
	http       *server
	worker     *worker.Worker
	localProxy *localproxy.Server
	jails      *jails              // the sandbox and the egress proxy
	claudeCode *claudecode.Harness // nil unless --harness claude-code
	issues     *issuetracking.Source
	mcpServers *mcpservers.Source
	stopReport context.CancelFunc
	reportDone chan struct{}
}

func startWorker(o workerOptions) (_ *workerProc, err error) {
	cpURL, err := url.Parse(o.cpURL)
	if err != nil || cpURL.Scheme == "" || cpURL.Host == "" {
		return nil, fmt.Errorf("bad control-plane URL %q", o.cpURL)
	}
	// What is started is stopped again, in reverse, when a later step
	// fails.
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	gatewayURL, _ := url.Parse(strings.TrimRight(o.cpURL, "/") + controlplane.GatewayPrefix)
	minter := minting.New(o.cpURL, o.identity, nil)
	transport := &minting.Transport{Minter: minter}

	client := anthropic.NewClient(
		option.WithBaseURL(gatewayURL.String()+"/"),
		option.WithHTTPClient(&http.Client{Transport: transport}),
		// The transport replaces this with a WorkerToken; the SDK wants a
		// credential to be present.
		option.WithAPIKey("talkide-inert"),
	)
	var policy *tools.Policy
	if o.toolPolicy != "" {
		b, err := os.ReadFile(o.toolPolicy)
		if err != nil {
			return nil, fmt.Errorf("tool policy: %w", err)
		}
		if policy, err = tools.ParsePolicy(b); err != nil {
			return nil, fmt.Errorf("tool policy %s: %w", o.toolPolicy, err)
		}
	}
	var mcpAllow *mcpservers.AllowList
	if o.mcpAllow != "" {
		b, err := os.ReadFile(o.mcpAllow)
		if err != nil {
			return nil, fmt.Errorf("MCP allow-list: %w", err)
		}
		if mcpAllow, err = mcpservers.ParseAllowList(b); err != nil {
			return nil, fmt.Errorf("MCP allow-list %s: %w", o.mcpAllow, err)
		}
	}
	// Reports and the issue tracker's calls travel the same signed channel.
	reportSigner := &trust.Signer{
		Direction: trust.ToControlPlane, Tenant: o.tenant, Env: o.env, KeyID: o.commandKeyID, Key: o.commandKey,
		Ring: o.commandKeys,
	}
	issuesClient := issuetracking.NewClient(o.cpURL, reportSigner, nil)
	issues := issuetracking.NewSource(issuesClient,
		&issuetracking.SourceOptions{Logger: o.logger.With("component", "issuetracking")})
	builds, err := newBuildRunner(o.builds, o, o.logger.With("component", "builds"))
	if err != nil {
		return nil, err
	}
	// The Claude Code harness reaches the same tools over MCP on the local
	// proxy's listener; the harness, made below, ties each call to its turn.
	var (
		proxy    *localproxy.Proxy
		resolver atomic.Pointer[claudecode.Harness]
		endpoint *workermcp.Handler
		lpOpts   = &localproxy.Options{Logger: o.logger.With("component", "localproxy")}
	)
	if o.harness == claudecode.Name {
		endpoint = workermcp.New(workermcp.Options{
			Capability: func(id string) string { return proxy.Capability(id) },
			Resolve: func(ctx context.Context, conv, tool, claimed string) (*harness.Turn, string, context.Context, error) {
				cc := resolver.Load()
				if cc == nil {
					return nil, "", nil, claudecode.ErrNoCall
				}
				return cc.ResolveCall(ctx, conv, tool, claimed)
			},
			Issues: issuesClient, Builds: builds,
			Logger: o.logger.With("component", "worker-mcp"),
		})
		lpOpts.MCP = endpoint
	}
	// The LocalGatewayProxy and the sandbox first: every process the agent
	// starts goes through the sandbox, and reaches out only through the
	// local proxy and the egress proxy.
	proxy = localproxy.New(gatewayURL, minter, lpOpts)
	lp, err := localproxy.Listen(proxy)
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { lp.Shutdown(context.Background()) })
	jails, err := startJails(o, lp)
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { jails.close(context.Background()) })

	// The servers a workspace declares in .mcp.json, as far as the
	// allow-list permits; Close (in shutdown) stops them.
	mcpSource := mcpservers.New(&mcpservers.Options{AllowList: mcpAllow, Logger: o.logger.With("component", "mcp-servers")})
	undo = append(undo, func() { mcpSource.Close() })
	h := native.New(client, &native.Options{
		Model:       o.model,
		Tools:       tools.Default(&tools.Options{Builds: builds}),
		Policy:      policy,
		ToolSources: append([]native.ToolSource{issues}, mcpSource),
		Logger:      o.logger.With("component", "harness"),
	})
	selected, cc, err := selectHarness(o, h, lp, endpoint)
	if err != nil {
		return nil, err
	}
	if cc != nil {
		resolver.Store(cc)
	}
	if o.workerID == "" {
		o.workerID, _ = os.Hostname()
		o.workerID += "-" + strconv.Itoa(os.Getpid())
	}
	sessions, err := sessionstore.New(filepath.Join(o.claudeConfigDir, "projects"), &sessionstore.Options{Holder: o.workerID, LeaseTTL: o.leaseTTL})
	if err != nil {
		return nil, err
	}
	reporter := worker.NewReporter(o.cpURL, reportSigner, &worker.ReporterOptions{Logger: o.logger.With("component", "reporter")})
	w, err := worker.New(o.tenant, o.env, worker.CommandKey{ID: o.commandKeyID, Key: o.commandKey}, sessions, o.workspaceRoot, selected, &worker.Options{
		WorkerID: o.workerID,
		Reporter: reporter, Logger: o.logger.With("component", "worker"),
		Notices:     append(slices.Clone(o.notices), jails.notices()...),
		Jail:        jails.jail,
		CommandKeys: o.commandKeys,
	})
	if err != nil {
		return nil, err
	}
	wh := readiness.Handler(workerReadiness(o), httpapi.BodyDeadline(0, w.Handler()))
	if httpapi.LoopbackHost(o.listen) {
		// On loopback (talkide dev) the unsigned /healthz would answer a
		// page that rebinds a name of its own to 127.0.0.1; the control-plane
		// calls a loopback worker by a loopback address.
		wh = httpapi.LoopbackOnly(o.logger.With("component", "worker"), wh)
	}
	srv, err := listen(o.listen, wh)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { reporter.Run(rctx); close(done) }()
	if err := w.FlushOutboxes(context.Background()); err != nil {
		o.logger.Warn("could not scan the session volume for undelivered reports", "err", err)
	}
	return &workerProc{claudeCode: cc, http: srv, worker: w, localProxy: lp, jails: jails, issues: issues, mcpServers: mcpSource, stopReport: cancel, reportDone: done}, nil
}

// shutdown stops taking commands, lets running turns finish within ctx,
// then stops the local proxy and delivers the last reports.
func (p *workerProc) shutdown(ctx context.Context) error {
	werr := p.worker.Shutdown(ctx)
	if p.claudeCode != nil {
		p.claudeCode.Close() // after the turns: stops every CLI process
	}
	herr := p.http.shutdown(ctx)
	lerr := p.localProxy.Shutdown(ctx)
	if graceOver(lerr) {
		lerr = nil
	}
	p.jails.close(ctx)
	ierr := p.issues.Close()
	p.mcpServers.Close() // after the turns: stops every .mcp.json server
	p.stopReport()
	<-p.reportDone
	return errors.Join(werr, herr, lerr, ierr)
}

// identityFromFile re-reads the token file on every call, so a rotated
// Secret takes effect without a restart.
// workerReadiness are the worker's /readyz checks: the session volume
// takes writes, the identity token is readable, the control-plane answers.
func workerReadiness(o workerOptions) map[string]readiness.Check {
	tokenReadable := o.identityReadable
	if tokenReadable == nil {
		tokenReadable = func() error { _, err := o.identity(); return err }
	}
	return map[string]readiness.Check{
		"session volume writable": readiness.Writable(o.claudeConfigDir),
		"token readable":          func(context.Context) error { return tokenReadable() },
		"control-plane reachable": readiness.Reachable(&http.Client{Timeout: 2 * time.Second}, o.cpURL),
	}
}

func identityFromFile(path string) func() (string, error) {
	return func() (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	}
}

// selectHarness returns the harness named by o.harness: the native one (h)
// or a Claude Code harness (cc) whose CLIs use the local proxy lp.
func selectHarness(o workerOptions, h *native.Harness, lp *localproxy.Server, endpoint *workermcp.Handler) (harness.Harness, *claudecode.Harness, error) {
	switch o.harness {
	case "", native.Name:
		return h, nil, nil
	case claudecode.Name:
		bin, err := exec.LookPath(o.claudeCodeBin)
		if err != nil {
			return nil, nil, fmt.Errorf("--harness claude-code: the Claude Code CLI (--claude-code-bin %q) was not found: %w", o.claudeCodeBin, err)
		}
		var servers []claudecode.MCPServer
		if endpoint != nil {
			for _, name := range endpoint.Servers() {
				servers = append(servers, claudecode.MCPServer{Name: name, URL: func(conv string) string { return lp.BaseURLFor(conv) + "/mcp/" + name },
					Timeout: workermcp.CallTimeout(name)})
			}
		}
		cc, err := claudecode.New(bin, claudecode.Proxy{
			BaseURLFor: lp.BaseURLFor,
			Capability: lp.Capability,
		}, &claudecode.Options{
			Model:      o.model,
			MCPServers: servers,
			Logger:     o.logger.With("component", "harness"),
		})
		if err != nil {
			return nil, nil, err
		}
		return cc, cc, nil
	default:
		return nil, nil, fmt.Errorf("--harness %q: want %s or %s", o.harness, native.Name, claudecode.Name)
	}
}
