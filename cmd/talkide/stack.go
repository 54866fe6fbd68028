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
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/gateway"
	"github.com/talkide/platform/internal/harness/native"
	"github.com/talkide/platform/internal/localproxy"
	"github.com/talkide/platform/internal/minting"
	"github.com/talkide/platform/internal/sessionstore"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/postgres"
	"github.com/talkide/platform/internal/store/sqlite"
	"github.com/talkide/platform/internal/tools"
	"github.com/talkide/platform/internal/trust"
	"github.com/talkide/platform/internal/worker"
)

// server is an http.Server on its own listener.
type server struct {
	srv *http.Server
	ln  net.Listener
}

func listen(addr string, h http.Handler) (*server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &server{srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, ln: ln}
	go s.srv.Serve(ln)
	return s, nil
}

func (s *server) url() string { return "http://" + s.ln.Addr().String() }

// cpOptions configure a control-plane process.
type cpOptions struct {
	listen      string
	database    string // --database: see openStore; empty means SQLite at dbPath
	dbPath      string
	secretsPath string
	upstream    string // Anthropic API base URL (or the simulator's)
	apiKey      string
	localUser   string
	tenant, env string
	logger      *slog.Logger
}

type cpProc struct {
	http    *server
	store   store.Store
	secrets *cpSecrets
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
	st, err := openStore(ctx, o.database, o.dbPath, o.logger)
	if err != nil {
		return nil, err
	}
	var gw http.Handler
	if o.apiKey != "" {
		up, err := url.Parse(o.upstream)
		if err != nil || up.Scheme == "" || up.Host == "" {
			st.Close()
			return nil, fmt.Errorf("bad Anthropic API URL %q", o.upstream)
		}
		gw = gateway.New(up, o.apiKey, keyring, st, &gateway.Options{Logger: o.logger.With("component", "gateway")})
	}
	cp, err := controlplane.New(controlplane.Config{
		Store: st, Keyring: keyring,
		CommandSecret: secrets.CommandSecret, CommandKeyID: secrets.CommandKeyID,
		Gateway: gw, LocalUser: o.localUser,
		DefaultTenant: o.tenant, DefaultEnv: o.env,
		Logger: o.logger.With("component", "controlplane"),
	})
	if err != nil {
		st.Close()
		return nil, err
	}
	srv, err := listen(o.listen, cp.Handler())
	if err != nil {
		st.Close()
		return nil, err
	}
	srv.srv.RegisterOnShutdown(cp.CloseStreams)
	return &cpProc{http: srv, store: st, secrets: secrets}, nil
}

// openStore opens the control-plane's store named by spec: a postgres:// or
// postgresql:// URL is PostgreSQL; sqlite:PATH, sqlite://PATH or a plain
// file path is SQLite; an empty spec is SQLite at defaultPath.
func openStore(ctx context.Context, spec, defaultPath string, logger *slog.Logger) (store.Store, error) {
	scheme, rest, isURL := strings.Cut(spec, "://")
	switch {
	case isURL && (strings.EqualFold(scheme, "postgres") || strings.EqualFold(scheme, "postgresql")):
		return postgres.Open(ctx, spec, &postgres.Options{Logger: logger})
	case isURL && strings.EqualFold(scheme, "sqlite"):
		spec = rest
	case isURL:
		return nil, fmt.Errorf("--database: unknown scheme %q: want postgres://, postgresql://, sqlite:PATH or a file path", scheme)
	case spec == "":
		spec = defaultPath
	}
	return sqlite.Open(ctx, strings.TrimPrefix(spec, "sqlite:"), &sqlite.Options{Logger: logger})
}

func (p *cpProc) shutdown(ctx context.Context) error {
	err := p.http.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = p.http.srv.Close() // SSE streams never end on their own
	}
	return errors.Join(err, p.store.Close())
}

// workerOptions configure a worker process.
type workerOptions struct {
	listen          string
	tenant, env     string
	cpURL           string // TALKIDE_GATEWAY_BASE_URL
	identity        func() (string, error)
	commandKeyID    string
	commandKey      []byte
	claudeConfigDir string
	workspaceRoot   string
	model           string
	toolPolicy      string // path of a tool policy JSON file (docs/tools.md); empty allows every call
	notice          string
	workerID        string        // names the worker in session leases; default host-pid
	leaseTTL        time.Duration // session lease lifetime; default sessionstore.DefaultLeaseTTL
	logger          *slog.Logger
}

type workerProc struct {
	http       *server
	worker     *worker.Worker
	localProxy *localproxy.Server
	stopReport context.CancelFunc
	reportDone chan struct{}
}

func startWorker(o workerOptions) (*workerProc, error) {
	cpURL, err := url.Parse(o.cpURL)
	if err != nil || cpURL.Scheme == "" || cpURL.Host == "" {
		return nil, fmt.Errorf("bad control-plane URL %q", o.cpURL)
	}
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
	h := native.New(client, &native.Options{
		Model:  o.model,
		Tools:  tools.Default(&tools.Options{}),
		Policy: policy,
		Logger: o.logger.With("component", "harness"),
	})
	if o.workerID == "" {
		o.workerID, _ = os.Hostname()
		o.workerID += "-" + strconv.Itoa(os.Getpid())
	}
	sessions, err := sessionstore.New(filepath.Join(o.claudeConfigDir, "projects"), &sessionstore.Options{Holder: o.workerID, LeaseTTL: o.leaseTTL})
	if err != nil {
		return nil, err
	}
	reporter := worker.NewReporter(o.cpURL, &trust.Signer{
		Direction: trust.ToControlPlane, Tenant: o.tenant, Env: o.env, KeyID: o.commandKeyID, Key: o.commandKey,
	}, &worker.ReporterOptions{Logger: o.logger.With("component", "reporter")})
	w, err := worker.New(worker.Config{
		Tenant: o.tenant, Env: o.env, WorkerID: o.workerID,
		Sessions: sessions, WorkspaceRoot: o.workspaceRoot,
		Harness:      h,
		CommandKeyID: o.commandKeyID, CommandKey: o.commandKey,
		Reporter: reporter, Logger: o.logger.With("component", "worker"),
		Notice: o.notice,
	})
	if err != nil {
		return nil, err
	}
	lp, err := localproxy.Listen(localproxy.New(gatewayURL, minter, o.logger.With("component", "localproxy")))
	if err != nil {
		return nil, err
	}
	srv, err := listen(o.listen, w.Handler())
	if err != nil {
		lp.Shutdown(context.Background())
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { reporter.Run(rctx); close(done) }()
	if err := w.FlushOutboxes(); err != nil {
		o.logger.Warn("could not scan the session volume for undelivered reports", "err", err)
	}
	return &workerProc{http: srv, worker: w, localProxy: lp, stopReport: cancel, reportDone: done}, nil
}

// shutdown stops taking commands, lets running turns finish within ctx,
// then stops the local proxy and delivers the last reports.
func (p *workerProc) shutdown(ctx context.Context) error {
	werr := p.worker.Shutdown(ctx)
	herr := p.http.srv.Shutdown(ctx)
	if errors.Is(herr, context.DeadlineExceeded) {
		herr = p.http.srv.Close()
	}
	lerr := p.localProxy.Shutdown(ctx)
	if errors.Is(lerr, context.DeadlineExceeded) {
		lerr = nil
	}
	p.stopReport()
	<-p.reportDone
	return errors.Join(werr, herr, lerr)
}

// identityFromFile re-reads the token file on every call, so a rotated
// Secret takes effect without a restart.
func identityFromFile(path string) func() (string, error) {
	return func() (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	}
}
