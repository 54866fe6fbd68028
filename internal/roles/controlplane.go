package roles

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"

	"github.com/talkide/platform/internal/auth"
	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/fdlimit"
	"github.com/talkide/platform/internal/gateway"
	"github.com/talkide/platform/internal/harness/native"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/kubeprovision"
	"github.com/talkide/platform/internal/lifecycle"
	"github.com/talkide/platform/internal/metrics"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/telemetry"
	"github.com/talkide/platform/internal/trust"
	"github.com/talkide/platform/internal/webui"
)

// ControlPlaneGrace is how long the control-plane lets requests finish
// when asked to stop.
const ControlPlaneGrace = 15 * time.Second

// Bounds are the caps on browser event streams, attached files and the
// gateway's request bodies, which talkide dev takes as talkide
// controlplane does.
type Bounds struct {
	// Stream caps on browser event streams (0: the control-plane's
	// defaults).
	MaxStreamsPerUser, MaxStreamsPerConversation, MaxStreams int
	// MaxBody and MaxBuffered bound the gateway's request bodies (0: its
	// defaults).
	MaxBody, MaxBuffered int64
	// UploadMemory and UploadMemoryPerUser bound the attached files' bytes
	// the control-plane holds at once (0: its defaults).
	UploadMemory, UploadMemoryPerUser int64
}

// ControlPlaneConfig configures a control-plane.
type ControlPlaneConfig struct {
	Listen string
	// Database is the store: see OpenStore; empty means SQLite at DBPath.
	Database    string
	DBPath      string
	SecretsPath string
	// Upstream is the Anthropic API base URL (or the simulator's); APIKey
	// its key. Without a key the gateway answers 503.
	Upstream string
	APIKey   string
	// Prices is a JSON file of price overrides (docs/budgets.md); empty:
	// the built-in prices.
	Prices string
	// OperatorTokens is the file of operator token hashes the operator
	// API checks (talkide admin operator-token); empty: operator-tokens
	// beside the secrets file.
	OperatorTokens string
	// LocalUser, when set, serves the browser API as this one user without
	// credentials (loopback only); else Auth says how users log in.
	LocalUser   string
	Auth        AuthConfig
	Tenant, Env string // of new conversations
	Bounds
	// InternalListen and MetricsListen, when set, serve the internal
	// endpoints (gateway, mint, worker reports and issues, operator API)
	// and /metrics on listeners of their own; Listen then answers 404 for
	// them (docs/accounts.md).
	InternalListen, MetricsListen string
	// ShareInterval and ShareTTL pace the sharing of stream counts on
	// PostgreSQL (0: the control-plane's defaults); tests shorten them.
	ShareInterval, ShareTTL time.Duration
	// Kubernetes, when set, runs the provisioner: each tenant-env's worker
	// reconciled into a namespace (docs/kubernetes.md).
	Kubernetes *ProvisionerConfig
	// WrapStore, when set, wraps the store once it is open: every part of
	// the control-plane reaches the store through what it returns, which
	// must keep the budget.Store methods. The gateway benchmark times the
	// store calls of a model call with it.
	WrapStore func(store.Store) store.Store
	// TitleModel names new conversations (controlplane.Options.TitleModel);
	// empty: the native harness's default model. Without an API key no
	// title call is made.
	TitleModel string
	// Telemetry says where spans and metrics go (docs/observability.md);
	// the zero value: nowhere.
	Telemetry telemetry.Config
	Logger    *slog.Logger

	telemetry *telemetry.Telemetry // talkide dev's, shared; nil: the role's own
}

// ProvisionerConfig is the Kubernetes provisioner's part of a
// control-plane.
type ProvisionerConfig struct {
	Client  kubernetes.Interface
	Options *kubeprovision.Options
	// Namespace is the control-plane's: its leader election's.
	Namespace string
}

// ControlPlane is a running control-plane.
type ControlPlane struct {
	group    lifecycle.Group
	HTTP     *Server // the public listener (everything, when not split)
	Internal *Server // nil unless InternalListen
	Metrics  *Server // nil unless MetricsListen
	Store    store.Store
	Secrets  *trust.Secrets
	Budget   *budget.Service
	Gateway  *gateway.Gateway // nil without an API key
	Server   *controlplane.Server
	metrics  *metrics.Metrics

	// crashed: Crash ended the sharing of stream counts, and a Stop
	// withdraws nothing.
	crashed   atomic.Bool
	stopShare context.CancelFunc
	shareDone chan struct{}
}

// StartControlPlane starts a control-plane; Stop ends it.
func StartControlPlane(ctx context.Context, c ControlPlaneConfig) (_ *ControlPlane, err error) {
	defaults.Logger(&c.Logger)
	// The local user is served without credentials: only on loopback,
	// where no one else reaches the browser API.
	if c.LocalUser != "" && !httpapi.LoopbackHost(c.Listen) {
		return nil, contract.Invalid(nil, "local-user", "needs a loopback --listen address")
	}
	p := &ControlPlane{}
	defer undoOnError(ctx, &err, p.group.Stop)
	tel, err := startTelemetry(ctx, &p.group, c.telemetry, c.Telemetry, &c.Logger, "talkide-controlplane")
	if err != nil {
		return nil, err
	}
	if p.Secrets, err = trust.LoadOrCreateSecrets(c.SecretsPath); err != nil {
		return nil, err
	}
	if c.OperatorTokens == "" {
		c.OperatorTokens = ControlPlaneDir(filepath.Dir(c.SecretsPath)).OperatorTokens()
	}
	operators, err := controlplane.NewOperatorTokens(c.OperatorTokens, &controlplane.OperatorTokensOptions{Logger: c.Logger.With("component", "operator-api")})
	if err != nil {
		return nil, fmt.Errorf("--operator-tokens: %w", err)
	}
	prices, err := LoadPrices(c.Prices)
	if err != nil {
		return nil, err
	}
	if p.Store, err = OpenStore(ctx, c.Database, c.DBPath, c.Logger); err != nil {
		return nil, err
	}
	p.group.Defer("store", func(context.Context) error { return p.Store.Close() })
	if c.WrapStore != nil {
		p.Store = c.WrapStore(p.Store)
	}
	// The control-plane's own registry, not the global default one.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p.metrics = metrics.New(reg, &metrics.Options{Prices: prices})
	// The budget runs with or without a gateway: the operator API sets
	// limits and reports usage either way.
	bst, ok := p.Store.(budget.Store)
	if !ok {
		return nil, fmt.Errorf("the store %T keeps no budgets", p.Store)
	}
	p.Budget = budget.New(bst, prices, &budget.Options{Logger: c.Logger.With("component", "budget"), Settled: p.metrics.Settled})
	p.metrics.CountReservations(p.Budget.Reservations)
	// The last settlements, before the store closes, even when the
	// servers' shutdown used the grace up.
	p.group.Defer("budget", func(ctx context.Context) error {
		bctx, cancel := afterGrace(ctx)
		defer cancel()
		return p.Budget.Close(bctx)
	})
	var gwHandler http.Handler // without a gateway a nil interface, not a nil *Gateway
	if c.APIKey != "" {
		up, err := url.Parse(c.Upstream)
		if err != nil || up.Scheme == "" || up.Host == "" {
			return nil, fmt.Errorf("bad Anthropic API URL %q", c.Upstream)
		}
		p.Gateway = gateway.New(up, c.APIKey, p.Secrets.Tokens(), p.Store, &gateway.Options{Logger: c.Logger.With("component", "gateway"), Budget: p.Budget, Metrics: p.metrics,
			MaxBody: c.MaxBody, MaxBuffered: c.MaxBuffered, TracerProvider: tel.TracerProvider()})
		gwHandler = p.Gateway
		// Its last usage records.
		p.group.Defer("gateway", func(ctx context.Context) error {
			bctx, cancel := afterGrace(ctx)
			defer cancel()
			return p.Gateway.Close(bctx)
		})
	}
	var authn *auth.Authenticator
	if c.LocalUser == "" {
		if authn, err = c.Auth.authenticator(p.Store, p.Secrets, c.Logger.With("component", "auth")); err != nil {
			return nil, err
		}
	}
	shared := sharedStreamCounts(p.Store)
	titleModel := ""
	if p.Gateway != nil {
		titleModel = cmp.Or(c.TitleModel, native.DefaultModel)
	}
	p.Server, err = controlplane.New(p.Store,
		controlplane.Keys{Tokens: p.Secrets.Tokens(), Commands: p.Secrets.Commands()},
		controlplane.TenantEnv{Tenant: c.Tenant, Env: c.Env}, &controlplane.Options{
			Gateway: gwHandler, LocalUser: c.LocalUser, Auth: authn, UI: webui.Handler(),
			Logger:            c.Logger.With("component", "controlplane"),
			Budget:            p.Budget,
			Operators:         operators,
			Metrics:           promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(c.Logger.Handler(), slog.LevelWarn)}),
			StreamMetrics:     p.metrics,
			UploadMetrics:     p.metrics,
			MaxStreamsPerUser: c.MaxStreamsPerUser, MaxStreamsPerConversation: c.MaxStreamsPerConversation, MaxStreams: c.MaxStreams,
			UploadMemory: c.UploadMemory, UploadMemoryPerUser: c.UploadMemoryPerUser,
			StreamCounts: shared, StreamShareInterval: c.ShareInterval, StreamShareTTL: c.ShareTTL,
			TitleModel:     titleModel,
			TracerProvider: tel.TracerProvider(),
		})
	if err != nil {
		return nil, err
	}
	// Stopped before the gateway, the budget and the store it uses.
	p.group.Go("titles", p.Server.RunTitles)
	if shared != nil {
		// When the streams have ended, the other replicas stop counting
		// this one's at once rather than after the TTL.
		p.group.Defer("stream counts", func(ctx context.Context) error {
			if p.crashed.Load() {
				return nil
			}
			bctx, cancel := afterGrace(ctx)
			defer cancel()
			return p.Server.WithdrawStreamCounts(bctx)
		})
		var shareCtx context.Context
		shareCtx, p.stopShare = context.WithCancel(context.Background())
		p.shareDone = make(chan struct{})
		p.group.Go("stream count sharing", func(ctx context.Context) error {
			defer close(p.shareDone)
			stop := context.AfterFunc(ctx, p.stopShare)
			defer stop()
			p.Server.ShareStreamCounts(shareCtx)
			return nil
		})
	}
	// A rotation written to the secrets file takes effect without a restart.
	keysLog := c.Logger.With("component", "keys")
	if watch, err := p.Secrets.Watcher(c.SecretsPath, keysLog); err != nil {
		keysLog.Warn("the secrets file is not watched: a key rotation needs a restart", "err", err)
	} else {
		p.group.Go("secrets file watch", watch.Run)
	}
	if authn != nil {
		p.group.Go("session sweeper", func(ctx context.Context) error {
			sweepSessions(ctx, authn, time.Hour, c.Logger.With("component", "auth"))
			return nil
		})
	}
	if c.Kubernetes != nil {
		if err := p.startProvisioner(c); err != nil {
			return nil, err
		}
	}
	if err := p.listen(c); err != nil {
		return nil, err
	}
	p.metrics.CountStreams(p.Server.StreamsOpen, p.Server.StreamUpstreams)
	lim := p.Server.StreamLimits()
	c.Logger.Info("browser stream caps", "per_user", lim.PerUser, "per_conversation", lim.PerConversation, "total", lim.Total,
		"across_replicas", shared != nil, "replica", p.Server.ReplicaID())
	return p, nil
}

// listen starts the control-plane's listeners: one for everything, or the
// public one apart from the internal and metrics ones that are set.
func (p *ControlPlane) listen(c ControlPlaneConfig) error {
	public := controlplane.Public
	if c.InternalListen == "" {
		public |= controlplane.Internal
	}
	if c.MetricsListen == "" {
		public |= controlplane.Metrics
	}
	var err error
	log := c.Logger.With("component", "http")
	if p.HTTP, err = listen(&p.group, "public", c.Listen, p.Server.HandlerFor(public), log, p.Gateway != nil); err != nil {
		return err
	}
	p.HTTP.srv.RegisterOnShutdown(p.Server.CloseStreams)
	if fl, ok := p.HTTP.ln.(*fdlimit.Listener); ok {
		p.metrics.CountShedConnections(fl.Shed)
	}
	if c.InternalListen != "" {
		if p.Internal, err = listen(&p.group, "internal", c.InternalListen, p.Server.HandlerFor(controlplane.Internal), log, p.Gateway != nil); err != nil {
			return fmt.Errorf("--internal-listen: %w", err)
		}
	}
	if c.MetricsListen != "" {
		if p.Metrics, err = listen(&p.group, "metrics", c.MetricsListen, p.Server.HandlerFor(controlplane.Metrics), log, false); err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
	}
	return nil
}

// startProvisioner runs the Kubernetes provisioner under a leader
// election among the replicas.
func (p *ControlPlane) startProvisioner(c ControlPlaneConfig) error {
	opts := *c.Kubernetes.Options
	opts.Logger = c.Logger.With("component", "provisioner")
	opts.CommandKeys = p.Secrets.Commands()
	prov := kubeprovision.New(c.Kubernetes.Client, p.Store, nil, "", &opts)
	// A new command key goes into every worker's Secret at once.
	p.Secrets.OnReload(prov.Resync)
	id, _ := os.Hostname()
	id += "-" + strconv.Itoa(os.Getpid())
	p.group.Go("provisioner", func(ctx context.Context) error {
		return prov.RunWithLeaderElection(ctx, c.Kubernetes.Namespace, id)
	})
	return nil
}

// Stop stops taking requests, lets those being served end within ctx,
// then stops every part in reverse: the last usage records and
// settlements reach the store before it closes.
func (p *ControlPlane) Stop(ctx context.Context) error {
	return p.group.Stop(ctx)
}

// Crash takes the control-plane away as a process that dies does, for
// tests of what the other replicas and the clients see: it stops
// publishing its stream counts first (their ends, which only its memory
// sees, reach no one), then cuts every connection. Stop afterwards
// releases the rest and withdraws nothing.
func (p *ControlPlane) Crash() {
	p.crashed.Store(true)
	if p.stopShare != nil {
		p.stopShare()
		<-p.shareDone
	}
	for _, s := range []*Server{p.HTTP, p.Internal, p.Metrics} {
		if s != nil {
			s.Close()
		}
	}
}

// Fatal delivers the error of a part that failed while the control-plane
// ran (a listener's Serve, the provisioner).
func (p *ControlPlane) Fatal() <-chan error { return p.group.Fatal() }

// RunControlPlane starts a control-plane, calls started with it, and runs
// it until ctx ends or a part fails; then it stops it within
// ControlPlaneGrace.
func RunControlPlane(ctx context.Context, c ControlPlaneConfig, started func(*ControlPlane)) error {
	p, err := StartControlPlane(ctx, c)
	return run(ctx, c.Logger, ControlPlaneGrace, p, err, started)
}

// role is what run runs.
type role interface {
	Fatal() <-chan error
	Stop(context.Context) error
}

// run tells started about the role r that started (unless err says it
// did not), then runs it until ctx ends or a part fails.
func run[R role](ctx context.Context, log *slog.Logger, grace time.Duration, r R, err error, started func(R)) error {
	if err != nil {
		return err
	}
	if started != nil {
		started(r)
	}
	return runUntil(ctx, log, grace, r.Fatal(), r.Stop)
}

// undoOnError stops, with stop, what a failed start began: when *err is
// set on return. The stop has a few seconds of its own, even once ctx is
// done.
func undoOnError(ctx context.Context, err *error, stop func(context.Context) error) {
	if *err == nil {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	stop(sctx)
}

// runUntil waits until ctx ends (the first signal) or fatal delivers,
// then stops what serves, giving it grace to finish what runs.
func runUntil(ctx context.Context, log *slog.Logger, grace time.Duration, fatal <-chan error, stop func(context.Context) error) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var ferr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "grace", grace)
	case ferr = <-fatal:
		log.Error("shutting down: a part failed", "err", ferr)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	return errors.Join(ferr, stop(sctx))
}
