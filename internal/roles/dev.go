package roles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/talkide/platform/internal/anthropicsim"
	"github.com/talkide/platform/internal/atomicfile"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/lifecycle"
	"github.com/talkide/platform/internal/provision"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/telemetry"
	"github.com/talkide/platform/internal/trust"
)

// What talkide dev serves: one tenant-env, one local user.
const (
	DevTenant = "local"
	DevEnv    = "dev"
	DevUser   = "local"
)

// DevGrace is how long talkide dev lets running turns finish when asked
// to stop.
const DevGrace = 30 * time.Second

// SimulatorNotice labels the simulated model wherever a user can see it.
const SimulatorNotice = "model simulator in use: replies come from TalkIDE's built-in Anthropic API simulator (a test and demo tool, not a real model); set ANTHROPIC_API_KEY to talk to the real API"

// DevConfig configures talkide dev.
type DevConfig struct {
	DataDir string
	// Addr is the browser API's loopback HOST:PORT.
	Addr string
	// APIKey is the Anthropic API key; empty runs the model simulator (a
	// test and demo tool, not a model) as the gateway's upstream.
	APIKey       string
	AnthropicURL string
	Agent        AgentConfig
	Bounds
	// PretendNoLandlock: the worker's sandbox finds no Landlock (tests).
	PretendNoLandlock bool
	// Login, when set, runs the control-plane without the local user,
	// authenticating as a shared deployment does (the browser login
	// test).
	Login *AuthConfig
	// Telemetry says where spans and metrics go (docs/observability.md);
	// the zero value: nowhere. TraceFile adds DATA-DIR/traces.jsonl,
	// which talkide admin trace reads.
	Telemetry telemetry.Config
	TraceFile bool
	Logger    *slog.Logger
}

// Dev is everything talkide dev runs.
type Dev struct {
	cfg          DevConfig
	simulator    lifecycle.Group // the simulator's server, when it runs
	ControlPlane *ControlPlane
	Worker       *Worker
	// Simulator is the model simulator, nil with an API key.
	Simulator *anthropicsim.Simulator
	// telemetry is shared by the control-plane and the worker, and shut
	// down after both.
	telemetry *telemetry.Telemetry
	simKey    string
	Info      DevInfo
}

// DevInfo is written to DIR/dev.json.
type DevInfo struct {
	ControlPlane    string `json:"controlplane"`
	Worker          string `json:"worker"`
	Gateway         string `json:"gateway"`
	LocalProxy      string `json:"localproxy"`
	Simulator       string `json:"simulator,omitempty"`
	ClaudeConfigDir string `json:"claude_config_dir"`
	Workspaces      string `json:"workspaces"`
	SimulatedModel  bool   `json:"simulated_model"`
}

// StartDev starts the control-plane, the simulator (without an API key)
// and the worker, each on its own loopback port, and writes DIR/dev.json.
func StartDev(ctx context.Context, cfg DevConfig) (_ *Dev, err error) {
	defaults.Logger(&cfg.Logger)
	if !httpapi.LoopbackHost(cfg.Addr) {
		return nil, fmt.Errorf("--addr %s is not a loopback address: talkide dev serves one local user without credentials", cfg.Addr)
	}
	if cfg.DataDir, err = filepath.Abs(cfg.DataDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	s := &Dev{cfg: cfg}
	defer undoOnError(ctx, &err, s.Stop)
	if cfg.TraceFile {
		cfg.Telemetry.File = filepath.Join(cfg.DataDir, telemetry.TraceFileName)
	}
	if s.telemetry, err = telemetry.New(ctx, cfg.Telemetry, "talkide-dev", envResource(DevTenant, DevEnv)...); err != nil {
		return nil, err
	}
	if s.telemetry.Enabled() {
		cfg.Logger = slog.New(telemetry.LogHandler(cfg.Logger.Handler()))
		s.cfg.Logger = cfg.Logger
	}
	if cfg.TraceFile {
		cfg.Logger.Info("spans are recorded in the trace file: talkide admin trace TURN_ID prints a turn's", "file", cfg.Telemetry.File)
	}
	upstream, key := cfg.AnthropicURL, cfg.APIKey
	if key == "" {
		key = fmt.Sprintf("sk-sim-%x", trust.NewKey())
		s.simKey = key
		s.Simulator = anthropicsim.New(key, &anthropicsim.Options{Logger: cfg.Logger.With("component", "simulator")})
		srv, err := listen(&s.simulator, "simulator", "127.0.0.1:0", s.Simulator, cfg.Logger, false)
		if err != nil {
			return nil, err
		}
		upstream = srv.URL()
		s.Info.Simulator = upstream
		s.Info.SimulatedModel = true
		cfg.Logger.Warn("no ANTHROPIC_API_KEY: using the model simulator, a test and demo tool, not a real model", "url", upstream)
	}
	if err := s.startControlPlane(ctx, upstream, key); err != nil {
		return nil, err
	}
	if err := s.startWorker(ctx); err != nil {
		return nil, err
	}
	return s, s.writeInfo()
}

func (s *Dev) startControlPlane(ctx context.Context, upstream, key string) error {
	user, login := DevUser, AuthConfig{}
	if s.cfg.Login != nil {
		user, login = "", *s.cfg.Login
	}
	cp, err := StartControlPlane(ctx, ControlPlaneConfig{
		Listen:      s.cfg.Addr,
		DBPath:      ControlPlaneDir(s.cfg.DataDir).Database(),
		SecretsPath: ControlPlaneDir(s.cfg.DataDir).Secrets(),
		Upstream:    upstream, APIKey: key,
		LocalUser: user, Auth: login, Tenant: DevTenant, Env: DevEnv,
		Bounds:     s.cfg.Bounds,
		TitleModel: s.cfg.Agent.Model, // the agent's: the one model known to be served
		Logger:     s.cfg.Logger,
		telemetry:  s.telemetry,
	})
	if err != nil {
		return err
	}
	s.ControlPlane = cp
	// A restarted control-plane comes back on the same address.
	s.cfg.Addr = cp.HTTP.Addr().String()
	s.Info.ControlPlane = cp.HTTP.URL()
	s.Info.Gateway = cp.HTTP.URL() + contract.GatewayPrefix
	return nil
}

// startWorker provisions tenant local / env dev (its identity token in a
// file, as a Kubernetes Secret would deliver it) and starts the worker.
func (s *Dev) startWorker(ctx context.Context) error {
	tokenPath := filepath.Join(s.cfg.DataDir, "worker", "identity-token")
	if err := EnsureIdentityToken(ctx, s.ControlPlane.Store, tokenPath, DevTenant, DevEnv); err != nil {
		return err
	}
	claudeDir := filepath.Join(s.cfg.DataDir, "claude")
	workspaces := filepath.Join(s.cfg.DataDir, "workspaces")
	var notices []string
	if s.Simulator != nil {
		notices = append(notices, SimulatorNotice)
	}
	// One worker per data directory, under one name across restarts: after
	// a crash it takes its sessions back at once instead of answering
	// session_elsewhere until the dead process's leases expire.
	host, _ := os.Hostname()
	newest := s.ControlPlane.Secrets.Commands().Newest()
	w, err := StartWorker(ctx, WorkerConfig{
		Listen: "127.0.0.1:0", Tenant: DevTenant, Env: DevEnv,
		ControlPlaneURL:   s.ControlPlane.HTTP.URL(),
		IdentityTokenFile: tokenPath,
		CommandKey:        trust.Key{ID: newest.ID, Secret: trust.DeriveEnvKey(newest.Secret, DevTenant, DevEnv)},
		ClaudeConfigDir:   claudeDir, WorkspaceRoot: workspaces,
		Agent:             s.cfg.Agent,
		Notices:           notices,
		WorkerID:          "dev-" + host,
		PretendNoLandlock: s.cfg.PretendNoLandlock,
		Logger:            s.cfg.Logger,
		telemetry:         s.telemetry,
	})
	if err != nil {
		return err
	}
	s.Worker = w
	if err := s.ControlPlane.Store.PutEnv(ctx, store.Env{Tenant: DevTenant, Name: DevEnv, WorkerURL: w.HTTP.URL(), CreatedAt: time.Now().UTC()}); err != nil {
		return err
	}
	s.Info.Worker = w.HTTP.URL()
	s.Info.LocalProxy = w.LocalProxy.URL()
	s.Info.ClaudeConfigDir = claudeDir
	s.Info.Workspaces = workspaces
	return nil
}

// EnsureIdentityToken keeps a valid identity token for tenant/env in path,
// issuing a new one (stored hashed) when the file is missing or stale.
func EnsureIdentityToken(ctx context.Context, st store.Store, path, tenant, env string) error {
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
	token, _, err := provision.IssueIdentityToken(ctx, st, tenant, env, provision.DefaultTokenTTL, now)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(token+"\n"), 0o600)
}

// devInfoFile is dev.json's name in the data directory.
const devInfoFile = "dev.json"

// maxDevInfo bounds a dev.json read: a few URLs and paths.
const maxDevInfo = 64 << 10

func (s *Dev) writeInfo() error {
	b, _ := json.MarshalIndent(s.Info, "", "  ")
	return os.WriteFile(filepath.Join(s.cfg.DataDir, devInfoFile), append(b, '\n'), 0o600)
}

// ReadDevInfo reads the DevInfo a talkide dev with data directory dir
// wrote: where talkide chat finds its control-plane.
func ReadDevInfo(dir string) (DevInfo, error) {
	var info DevInfo
	path := filepath.Join(dir, devInfoFile)
	b, err := atomicfile.ReadFile(path, maxDevInfo)
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return DevInfo{}, fmt.Errorf("%s: %w", path, err)
	}
	return info, nil
}

// Config is the configuration dev runs with.
func (s *Dev) Config() DevConfig { return s.cfg }

// SimulatorKey is the key the simulator checks ("" with a real API key):
// what a test presents to it directly.
func (s *Dev) SimulatorKey() string { return s.simKey }

// RestartWorker stops the worker and starts a new one on the same session
// volume, as a pod restart would.
func (s *Dev) RestartWorker(ctx context.Context) error {
	if err := s.Worker.Stop(ctx); err != nil {
		return err
	}
	s.Worker = nil
	if err := s.startWorker(ctx); err != nil {
		return err
	}
	return s.writeInfo()
}

// RestartControlPlane stops the control-plane and starts it again on the
// same address, database and secrets, as a redeploy would.
func (s *Dev) RestartControlPlane(ctx context.Context) error {
	if err := s.ControlPlane.Stop(ctx); err != nil {
		return err
	}
	s.ControlPlane = nil
	upstream, key := s.cfg.AnthropicURL, s.cfg.APIKey
	if s.Simulator != nil {
		upstream, key = s.Info.Simulator, s.simKey
	}
	return s.startControlPlane(ctx, upstream, key)
}

// Shutdown stops the stack once Wait has returned, giving running turns
// DevGrace to finish and saying so in the log. The grace ends early at
// hurry's first delivery (a second Ctrl-C: the turns end as
// worker_restarted and can be sent again) or when parent ends.
func (s *Dev) Shutdown(parent context.Context, hurry <-chan os.Signal) error {
	log := s.cfg.Logger
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), DevGrace)
	defer cancel()
	stopped := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stopped)
	wg.Go(func() {
		select {
		case <-hurry:
			log.Warn("second signal: stopping running turns now; they end as worker_restarted and can be sent again")
			cancel()
		case <-parent.Done():
			cancel()
		case <-stopped:
		}
	})
	if running := s.Worker.Worker.Load().RunningTurns; running > 0 {
		log.Info(fmt.Sprintf("shutting down: waiting up to %s for %d running turn(s) to finish; press Ctrl-C again to stop them now", DevGrace, running))
	} else {
		log.Info("shutting down")
	}
	return s.Stop(ctx)
}

// Wait waits until ctx ends (nil) or a part of the control-plane or the
// worker fails (its error).
func (s *Dev) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-s.ControlPlane.Fatal():
		return err
	case err := <-s.Worker.Fatal():
		return err
	}
}

// Stop stops the worker first (its turns finish or are interrupted and
// its last reports reach the control-plane), then the control-plane, then
// the simulator.
func (s *Dev) Stop(ctx context.Context) error {
	var errs []error
	if s.Worker != nil {
		errs = append(errs, s.Worker.Stop(ctx))
	}
	if s.ControlPlane != nil {
		errs = append(errs, s.ControlPlane.Stop(ctx))
		s.ControlPlane = nil
	}
	errs = append(errs, s.simulator.Stop(ctx))
	// Last: the spans of everything that stopped before.
	tctx, cancel := afterGrace(ctx)
	defer cancel()
	errs = append(errs, s.telemetry.Shutdown(tctx))
	return errors.Join(errs...)
}

// SimulatorGrace is how long the simulator lets streams finish when
// asked to stop.
const SimulatorGrace = 10 * time.Second

// RunSimulator serves the model simulator (a test and demo tool, not a
// model) on addr until ctx ends, checking key as the API does; started
// is told its URL.
func RunSimulator(ctx context.Context, addr, key string, o *anthropicsim.Options, started func(url string)) error {
	var g lifecycle.Group
	srv, err := listen(&g, "simulator", addr, anthropicsim.New(key, o), o.Logger, false)
	if err != nil {
		return err
	}
	if started != nil {
		started(srv.URL())
	}
	return runUntil(ctx, o.Logger, SimulatorGrace, g.Fatal(), g.Stop)
}
