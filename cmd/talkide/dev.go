package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/talkide/platform/internal/anthropicsim"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/provision"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/trust"
)

const (
	devTenant = "local"
	devEnv    = "dev"
	devUser   = "local"
	// identityTTL is the default lifetime of an identity token.
	identityTTL = provision.DefaultTokenTTL
)

// simulatorNotice labels the simulated model wherever a user can see it.
const simulatorNotice = "model simulator in use: replies come from TalkIDE's built-in Anthropic API simulator (a test and demo tool, not a real model); set ANTHROPIC_API_KEY to talk to the real API"

// devConfig is talkide dev's configuration.
type devConfig struct {
	dataDir      string
	addr         string
	apiKey       string // empty: run the simulator
	anthropicURL string
	agent        agentFlags
	streams      streamFlags
	gateway      gatewayFlags
	// maxBody and maxBuffered are gateway's, parsed.
	maxBody, maxBuffered int64
	// pretendNoLandlock: the worker's sandbox finds no Landlock (tests).
	pretendNoLandlock bool
	// login, when set, runs the control-plane without the local user,
	// authenticating as a shared deployment does with these flags (the
	// browser login test).
	login  *authFlags
	logger *slog.Logger
}

// devStack is everything talkide dev runs.
type devStack struct {
	cfg       devConfig
	cp        *cpProc
	worker    *workerProc
	simulator *server
	sim       *anthropicsim.Simulator
	simKey    string
	info      devInfo
}

// devInfo is written to DIR/dev.json.
type devInfo struct {
	ControlPlane    string `json:"controlplane"`
	Worker          string `json:"worker"`
	Gateway         string `json:"gateway"`
	LocalProxy      string `json:"localproxy"`
	Simulator       string `json:"simulator,omitempty"`
	ClaudeConfigDir string `json:"claude_config_dir"`
	Workspaces      string `json:"workspaces"`
	SimulatedModel  bool   `json:"simulated_model"`
}

func newDevCmd(std stdio) *cobra.Command {
	var (
		cfg  devConfig
		logs logFlags
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole platform on this machine: control-plane, one worker, the model simulator",
		Long: `Run the whole platform on this machine: the control-plane on a loopback
address, one worker (tenant "local", env "dev"), embedded SQLite, sessions and
workspaces under --data-dir, and, without ANTHROPIC_API_KEY, the built-in model
simulator (a test and demo tool, not a real model). The browser API serves one
local user, "local", without credentials. DATA-DIR/dev.json names the URL of
every part. Ctrl-C stops everything; a second Ctrl-C stops running turns at
once instead of waiting for them.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := logs.logger(cmd, std.err)
			if err != nil {
				return err
			}
			if err := cfg.streams.check(cmd); err != nil {
				return err
			}
			if cfg.maxBody, cfg.maxBuffered, err = cfg.gateway.options(cmd); err != nil {
				return err
			}
			cfg.logger = logger
			return runDev(cmd.Context(), cfg, std)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&cfg.dataDir, "data-dir", "./.talkide", "directory for the database, secrets, sessions and workspaces")
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:7878", "loopback HOST:PORT of the browser API")
	fs.StringVar(&cfg.anthropicURL, "anthropic-url", "https://api.anthropic.com", "Anthropic API base URL (used when ANTHROPIC_API_KEY is set)")
	bindEnv(fs, "data-dir", "addr", "anthropic-url")
	registerAgentFlags(fs, &cfg.agent)
	registerStreamFlags(fs, &cfg.streams)
	registerGatewayFlags(fs, &cfg.gateway)
	logs.add(fs)
	return cmd
}

// devGrace is how long talkide dev lets running turns finish when asked to
// stop; a second signal cuts it short.
const devGrace = 30 * time.Second

func runDev(parent context.Context, cfg devConfig, std stdio) error {
	ctx, later, stop := untilSignal(parent, std.signals)
	defer stop()
	logger := cfg.logger
	// The key was handed over at start (secretenv.go): no environment of
	// this process or of what it starts holds it.
	cfg.apiKey = secret("ANTHROPIC_API_KEY")
	os.Unsetenv("ANTHROPIC_API_KEY") // a process that did not re-execute (a test)
	if err := undumpable(); err != nil {
		logger.Warn("the process stays dumpable: its /proc files are readable to its own user", "err", err)
	}
	raiseFileLimit(logger)

	st, err := startDev(ctx, cfg)
	if err != nil {
		return err
	}
	model := "the real Anthropic API at " + cfg.anthropicURL
	if st.sim != nil {
		model = "the MODEL SIMULATOR (a test and demo tool, not a real model) at " + st.info.Simulator
	}
	fmt.Fprintf(std.out, "TalkIDE dev is running.\n  browser API: %s (user %q, no login on loopback)\n  model:       %s\n  state:       %s\n  chat:        %s chat --data-dir %s\nPress Ctrl-C to stop.\n",
		st.info.ControlPlane, devUser, model, cfg.dataDir, selfCommand(), cfg.dataDir)
	<-ctx.Done()

	// The grace period ends after devGrace, at a second signal, or when
	// the caller's context ends.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(parent), devGrace)
	defer cancel()
	go func() {
		select {
		case <-later:
			logger.Warn("second signal: stopping running turns now; they end as worker_restarted and can be sent again")
			cancel()
		case <-parent.Done():
			cancel()
		case <-sctx.Done():
		}
	}()
	_, running := st.worker.worker.Stats()
	if running > 0 {
		logger.Info(fmt.Sprintf("shutting down: waiting up to %s for %d running turn(s) to finish; press Ctrl-C again to stop them now", devGrace, running))
	} else {
		logger.Info("shutting down")
	}
	return st.shutdown(sctx)
}

// selfCommand is how the user can run this binary again: "go run
// ./cmd/talkide" when it was started by go run, else the name it was
// started by.
func selfCommand() string {
	exe, _ := os.Executable()
	var arg0 string
	if len(os.Args) > 0 {
		arg0 = os.Args[0]
	}
	return runAgain(exe, arg0)
}

// goRunCached matches the directory of an executable go run runs from the
// build cache (Go 1.24 on): GOCACHE/xx/HASH-d/talkide.
var goRunCached = regexp.MustCompile(`^[0-9a-f]{64}-d$`)

// runAgain is selfCommand's answer for the executable's path and the name
// it was started by. go run builds into a temporary go-build directory, or
// runs the executable from the build cache, which is a go-build directory
// too unless GOCACHE moved it; either way that path is no command for the
// user to type.
func runAgain(exe, arg0 string) string {
	if strings.Contains(exe, string(filepath.Separator)+"go-build") || goRunCached.MatchString(filepath.Base(filepath.Dir(exe))) {
		return "go run ./cmd/talkide"
	}
	if arg0 != "" {
		return arg0
	}
	return "talkide"
}

// startDev starts control-plane, simulator (without an API key) and worker,
// each on its own loopback port, and writes DIR/dev.json.
func startDev(ctx context.Context, cfg devConfig) (_ *devStack, err error) {
	if !httpapi.LoopbackHost(cfg.addr) {
		return nil, fmt.Errorf("--addr %s is not a loopback address: talkide dev serves one local user without credentials", cfg.addr)
	}
	if cfg.dataDir, err = filepath.Abs(cfg.dataDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.dataDir, 0o700); err != nil {
		return nil, err
	}
	s := &devStack{cfg: cfg}
	defer func() {
		if err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s.shutdown(sctx)
		}
	}()
	upstream, key := cfg.anthropicURL, cfg.apiKey
	if key == "" {
		key = fmt.Sprintf("sk-sim-%x", trust.NewKey())
		s.simKey = key
		s.sim = anthropicsim.New(key, &anthropicsim.Options{Logger: cfg.logger.With("component", "simulator")})
		if s.simulator, err = listen("127.0.0.1:0", s.sim); err != nil {
			return s, err
		}
		upstream = s.simulator.url()
		s.info.Simulator = upstream
		s.info.SimulatedModel = true
		cfg.logger.Warn("no ANTHROPIC_API_KEY: using the model simulator, a test and demo tool, not a real model", "url", upstream)
	}
	if err := s.startControlPlane(ctx, upstream, key); err != nil {
		return s, err
	}
	if err := s.startWorker(ctx); err != nil {
		return s, err
	}
	return s, s.writeInfo()
}

func (s *devStack) startControlPlane(ctx context.Context, upstream, key string) error {
	user, login := devUser, authFlags{}
	if s.cfg.login != nil {
		user, login = "", *s.cfg.login
	}
	cp, err := startControlPlane(ctx, cpOptions{
		listen:      s.cfg.addr,
		dbPath:      filepath.Join(s.cfg.dataDir, "controlplane.db"),
		secretsPath: filepath.Join(s.cfg.dataDir, "controlplane-secrets.json"),
		upstream:    upstream, apiKey: key,
		localUser: user, auth: login, tenant: devTenant, env: devEnv,
		streams: s.cfg.streams,
		maxBody: s.cfg.maxBody, maxBuffered: s.cfg.maxBuffered,
		logger: s.cfg.logger,
	})
	if err != nil {
		return err
	}
	s.cp = cp
	// A restarted control-plane comes back on the same address.
	s.cfg.addr = cp.http.ln.Addr().String()
	s.info.ControlPlane = cp.http.url()
	s.info.Gateway = cp.http.url() + controlplane.GatewayPrefix
	return nil
}

// startWorker provisions tenant local / env dev (its identity token in a
// file, as a Kubernetes Secret would deliver it) and starts the worker.
func (s *devStack) startWorker(ctx context.Context) error {
	tokenPath := filepath.Join(s.cfg.dataDir, "worker", "identity-token")
	if err := ensureIdentityToken(ctx, s.cp.store, tokenPath, devTenant, devEnv); err != nil {
		return err
	}
	claudeDir := filepath.Join(s.cfg.dataDir, "claude")
	workspaces := filepath.Join(s.cfg.dataDir, "workspaces")
	var notices []string
	if s.sim != nil {
		notices = append(notices, simulatorNotice)
	}
	// One worker per data directory, under one name across restarts: after
	// a crash it takes its sessions back at once instead of answering
	// session_elsewhere until the dead process's leases expire.
	host, _ := os.Hostname()
	o := workerOptions{
		listen: "127.0.0.1:0", tenant: devTenant, env: devEnv,
		cpURL:           s.cp.http.url(),
		identity:        identityFromFile(tokenPath),
		commandKeyID:    s.cp.secrets.newestCommandKey().ID,
		commandKey:      trust.DeriveEnvKey(s.cp.secrets.newestCommandKey().Secret, devTenant, devEnv),
		claudeConfigDir: claudeDir, workspaceRoot: workspaces,
		notices:           notices,
		workerID:          "dev-" + host,
		pretendNoLandlock: s.cfg.pretendNoLandlock,
		logger:            s.cfg.logger,
	}
	if err := s.cfg.agent.apply(&o); err != nil {
		return err
	}
	w, err := startWorker(o)
	if err != nil {
		return err
	}
	s.worker = w
	if err := s.cp.store.PutEnv(ctx, store.Env{Tenant: devTenant, Name: devEnv, WorkerURL: w.http.url(), CreatedAt: time.Now().UTC()}); err != nil {
		return err
	}
	s.info.Worker = w.http.url()
	s.info.LocalProxy = w.localProxy.URL()
	s.info.ClaudeConfigDir = claudeDir
	s.info.Workspaces = workspaces
	return nil
}

// ensureIdentityToken keeps a valid identity token for tenant/env in path,
// issuing a new one (stored hashed) when the file is missing or stale.
func ensureIdentityToken(ctx context.Context, st store.Store, path, tenant, env string) error {
	if _, err := provision.EnsureEnv(ctx, st, tenant, env, ""); err != nil {
		return err
	}
	now := time.Now().UTC()
	if b, err := os.ReadFile(path); err == nil {
		rec, err := provision.Authenticate(ctx, st, strings.TrimSpace(string(b)), now)
		if err == nil && rec.RevokedAt.IsZero() && rec.Tenant == tenant && rec.Env == env && rec.ExpiresAt.Sub(now) > 24*time.Hour {
			return nil
		}
	}
	token, _, err := provision.IssueIdentityToken(ctx, st, tenant, env, identityTTL, now)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(token+"\n"), 0o600)
}

func (s *devStack) writeInfo() error {
	b, _ := json.MarshalIndent(s.info, "", "  ")
	return os.WriteFile(filepath.Join(s.cfg.dataDir, "dev.json"), append(b, '\n'), 0o600)
}

// restartWorker stops the worker and starts a new one on the same session
// volume, as a pod restart would.
func (s *devStack) restartWorker(ctx context.Context) error {
	if err := s.worker.shutdown(ctx); err != nil {
		return err
	}
	s.worker = nil
	if err := s.startWorker(ctx); err != nil {
		return err
	}
	return s.writeInfo()
}

// restartControlPlane stops the control-plane and starts it again on the
// same address, database and secrets, as a redeploy would.
func (s *devStack) restartControlPlane(ctx context.Context) error {
	if err := s.cp.shutdown(ctx); err != nil {
		return err
	}
	s.cp = nil
	upstream, key := s.cfg.anthropicURL, s.cfg.apiKey
	if s.sim != nil {
		upstream, key = s.info.Simulator, s.simKey
	}
	return s.startControlPlane(ctx, upstream, key)
}

// shutdown stops the worker first (its turns finish or are interrupted and
// its last reports reach the control-plane), then the control-plane, then
// the simulator.
func (s *devStack) shutdown(ctx context.Context) error {
	var errs []error
	if s.worker != nil {
		errs = append(errs, s.worker.shutdown(ctx))
	}
	if s.cp != nil {
		errs = append(errs, s.cp.shutdown(ctx))
		s.cp = nil
	}
	if s.simulator != nil {
		errs = append(errs, s.simulator.shutdown(ctx))
	}
	err := errors.Join(errs...)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
