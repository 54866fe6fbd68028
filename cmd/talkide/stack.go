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
	st, err := sqlite.Open(ctx, o.dbPath, &sqlite.Options{Logger: o.logger})
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
	notice          string
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
	h := native.New(client, &native.Options{
		Model:  o.model,
		Tools:  tools.Default(&tools.Options{}),
		Logger: o.logger.With("component", "harness"),
	})
	sessions, err := sessionstore.New(filepath.Join(o.claudeConfigDir, "projects"))
	if err != nil {
		return nil, err
	}
	reporter := worker.NewReporter(o.cpURL, &trust.Signer{
		Direction: trust.ToControlPlane, Tenant: o.tenant, Env: o.env, KeyID: o.commandKeyID, Key: o.commandKey,
	}, &worker.ReporterOptions{Logger: o.logger.With("component", "reporter")})
	w, err := worker.New(worker.Config{
		Tenant: o.tenant, Env: o.env,
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
