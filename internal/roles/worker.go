package roles

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
	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/harness/claudecode"
	"github.com/talkide/platform/internal/harness/native"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/lifecycle"
	"github.com/talkide/platform/internal/localproxy"
	"github.com/talkide/platform/internal/mcp/issuetracking"
	mcpservers "github.com/talkide/platform/internal/mcp/servers"
	"github.com/talkide/platform/internal/mcp/workermcp"
	"github.com/talkide/platform/internal/minting"
	"github.com/talkide/platform/internal/readiness"
	"github.com/talkide/platform/internal/replicaset"
	"github.com/talkide/platform/internal/sandbox"
	"github.com/talkide/platform/internal/secretfile"
	"github.com/talkide/platform/internal/sessionstore"
	"github.com/talkide/platform/internal/telemetry"
	"github.com/talkide/platform/internal/tools"
	"github.com/talkide/platform/internal/trust"
	"github.com/talkide/platform/internal/worker"
)

// WorkerGrace is how long a worker lets running turns finish when asked
// to stop; the Deployment's terminationGracePeriodSeconds must exceed it.
const WorkerGrace = 60 * time.Second

// WorkerConfig configures a tenant-env's worker.
type WorkerConfig struct {
	Listen      string
	Tenant, Env string
	// ControlPlaneURL is the control-plane's base URL
	// (TALKIDE_GATEWAY_BASE_URL): the gateway, the mint, the reports.
	ControlPlaneURL string
	// The identity token: a file, watched (a rotated Secret takes effect
	// without a restart), or the token itself.
	IdentityTokenFile string
	IdentityToken     string
	// The command key: a file (ID:BASE64 or bare base64 named by
	// CommandKeyID), watched, a replaced key verifying CommandKeyGrace
	// more; or the key itself.
	CommandKeyFile  string
	CommandKeyID    string
	CommandKeyGrace time.Duration
	CommandKey      trust.Key
	// ClaudeConfigDir is the session volume; WorkspaceRoot the
	// conversations' workspaces.
	ClaudeConfigDir string
	WorkspaceRoot   string
	Agent           AgentConfig
	// Notices are told to every session (the model simulator in use).
	Notices []string
	// PretendNoLandlock makes the sandbox find no Landlock (tests of a
	// machine without it).
	PretendNoLandlock bool
	WorkerID          string        // names the worker in session leases; default host-pid
	LeaseTTL          time.Duration // session lease lifetime; default sessionstore.DefaultLeaseTTL
	// AdvertiseHost, when set, is the host (a pod's IP) this replica's
	// peers reach it at, on the port it listens on: the worker then joins
	// the replica registry on the session volume and routes commands among
	// the replicas (docs/sessions.md). Empty: one replica, as talkide dev.
	AdvertiseHost string
	// ReplicaInterval is how often the registry entry is rewritten
	// (default replicaset.DefaultInterval); RebalanceIdle how long a
	// session goes unused before it may be released to spread the load
	// (default worker.DefaultRebalanceIdle). Tests shorten both.
	ReplicaInterval, RebalanceIdle time.Duration
	// Telemetry says where spans and metrics go (docs/observability.md);
	// the zero value: nowhere.
	Telemetry telemetry.Config
	Logger    *slog.Logger

	telemetry *telemetry.Telemetry // talkide dev's, shared; nil: the role's own
}

// AgentConfig shapes the agent: talkide dev and talkide worker share it.
type AgentConfig struct {
	Model         string
	Harness       string // native (default) or claude-code (docs/harnesses.md)
	ClaudeCodeBin string // the claude executable, for the claude-code harness
	// ToolPolicy is a tool policy JSON file (docs/tools.md); empty allows
	// every call. MCPAllow the MCP server allow-list (docs/mcp.md); empty
	// allows no .mcp.json server.
	ToolPolicy, MCPAllow string
	// Sandbox is how agent commands are confined: auto (default),
	// landlock or none (docs/sandbox.md).
	Sandbox string
	// SandboxReadOnly are paths agent commands may read beyond
	// sandbox.DefaultReadOnly.
	SandboxReadOnly []string
	// SandboxCPUs is each agent command's CPU ceiling where it gets a cpu
	// cgroup of its own (sandbox.Limits.CPUs); 0: none, so that a build
	// alone on the worker has every CPU the pod has.
	SandboxCPUs float64
	// SandboxHelper is the sandbox's helper; empty: talkide-sandbox beside
	// the executable, or the executable itself.
	SandboxHelper string
	// EgressAllow is the egress allow-list file; empty allows no
	// destination.
	EgressAllow string
	Builds      BuildConfig
	// MaxRunningTurns bounds the turns the worker runs at once
	// (worker.Options.MaxRunningTurns): 0 derives it from the open-file
	// limit, a negative value sets no bound.
	MaxRunningTurns int

	mode sandbox.Mode // Sandbox, parsed by Check
}

// Check validates the configuration, naming the flag of what is wrong.
func (a *AgentConfig) Check() error {
	a.mode = sandbox.ModeAuto
	if a.Sandbox != "" {
		var err error
		if a.mode, err = sandbox.ParseMode(a.Sandbox); err != nil {
			return contract.Invalid(nil, "sandbox", "%q: %v", a.Sandbox, err)
		}
	}
	// A cpu cgroup's quota is at least a hundredth of its period.
	if a.SandboxCPUs != 0 && !(a.SandboxCPUs >= 0.01 && a.SandboxCPUs <= 1024) {
		return contract.Invalid(nil, "sandbox-cpus", "%g: want 0 (no ceiling) or a number of CPUs from 0.01 to 1024, like 1.5", a.SandboxCPUs)
	}
	return a.Builds.Check()
}

// WorkerEnv is what a worker takes from its environment: the seam's
// variables, and the secrets handed over from it at start
// (internal/secretenv) for where no file names them.
type WorkerEnv struct {
	GatewayBaseURL  string // TALKIDE_GATEWAY_BASE_URL: the control-plane's base URL
	ClaudeConfigDir string // CLAUDE_CONFIG_DIR: the session volume
	IdentityToken   string // TALKIDE_WORKER_IDENTITY_TOKEN
	CommandKey      string // TALKIDE_WORKER_COMMAND_KEY: ID:BASE64, or bare base64 named by CommandKeyID
	// HasAPIKey says ANTHROPIC_API_KEY is set, with which a worker
	// refuses to start: it must never hold the key.
	HasAPIKey bool
}

// FromEnv completes o, as its flags left it, from env, and refuses a
// worker that must not start.
func (o *WorkerConfig) FromEnv(env WorkerEnv) error {
	if o.Tenant == "" || o.Env == "" {
		return errors.New("--tenant and --env are required")
	}
	if env.HasAPIKey {
		return errors.New("ANTHROPIC_API_KEY is set in the worker's environment; the worker must never hold it (remove it)")
	}
	if o.ControlPlaneURL = env.GatewayBaseURL; o.ControlPlaneURL == "" {
		return errors.New("TALKIDE_GATEWAY_BASE_URL (the control-plane's base URL) is required")
	}
	if o.ClaudeConfigDir = env.ClaudeConfigDir; o.ClaudeConfigDir == "" {
		return errors.New("CLAUDE_CONFIG_DIR (the session volume) is required")
	}
	if o.WorkspaceRoot == "" {
		o.WorkspaceRoot = filepath.Join(filepath.Dir(filepath.Clean(o.ClaudeConfigDir)), "workspaces")
	}
	if o.IdentityTokenFile == "" {
		o.IdentityToken = env.IdentityToken
	}
	if o.CommandKeyGrace <= 0 {
		return errors.New("--command-key-grace must be positive")
	}
	if o.CommandKeyFile == "" {
		k, err := trust.ParseKey(env.CommandKey, o.CommandKeyID)
		if err != nil {
			// Not err: it could quote the key.
			return trust.ErrNoCommandKey
		}
		o.CommandKey = k
	}
	return nil
}

// Worker is a running worker.
type Worker struct {
	group      lifecycle.Group
	jails      *jails
	identity   func() (string, error)
	HTTP       *Server
	Worker     *worker.Worker
	LocalProxy *localproxy.Server
}

// StartWorker starts a worker; Stop ends it.
func StartWorker(ctx context.Context, o WorkerConfig) (_ *Worker, err error) {
	defaults.Logger(&o.Logger)
	if err := o.Agent.Check(); err != nil {
		return nil, err
	}
	cpURL, err := url.Parse(o.ControlPlaneURL)
	if err != nil || cpURL.Scheme == "" || cpURL.Host == "" {
		return nil, fmt.Errorf("bad control-plane URL %q", o.ControlPlaneURL)
	}
	p := &Worker{}
	defer undoOnError(ctx, &err, p.group.Stop)
	tel, err := startTelemetry(ctx, &p.group, o.telemetry, o.Telemetry, &o.Logger, "talkide-worker", envResource(o.Tenant, o.Env)...)
	if err != nil {
		return nil, err
	}
	identity, identityReadable, err := p.identitySource(o)
	if err != nil {
		return nil, err
	}
	p.identity = identity
	commandKey, commandKeys, err := p.commandKeys(o)
	if err != nil {
		return nil, err
	}
	gatewayURL, _ := url.Parse(strings.TrimRight(o.ControlPlaneURL, "/") + contract.GatewayPrefix)
	minter := minting.New(o.ControlPlaneURL, identity, nil)
	// The local proxy parents a model call under its conversation's
	// running turn, which only the worker, made last, knows.
	var turns atomic.Pointer[worker.Worker]
	client := anthropic.NewClient(
		option.WithBaseURL(gatewayURL.String()+"/"),
		option.WithHTTPClient(&http.Client{Transport: &minting.Transport{Minter: minter}}),
		// The transport replaces this with a WorkerToken; the SDK wants a
		// credential to be present.
		option.WithAPIKey("talkide-inert"),
	)
	policy, mcpAllow, err := readAgentFiles(o.Agent)
	if err != nil {
		return nil, err
	}
	// Reports and the issue tracker's calls travel the same signed channel.
	reportSigner := &trust.Signer{
		Direction: trust.ToControlPlane, Tenant: o.Tenant, Env: o.Env, KeyID: commandKey.ID, Key: commandKey.Secret,
		Ring: commandKeys,
	}
	// The reporter delivers until everything else has stopped: the last
	// reports of the turns that ended in the shutdown.
	reporter := worker.NewReporter(o.ControlPlaneURL, reportSigner, &worker.ReporterOptions{Logger: o.Logger.With("component", "reporter")})
	p.group.Go("reporter", func(ctx context.Context) error { reporter.Run(ctx); return nil })
	issuesClient := issuetracking.NewClient(o.ControlPlaneURL, reportSigner, nil)
	issues := issuetracking.NewSource(issuesClient,
		&issuetracking.SourceOptions{Logger: o.Logger.With("component", "issuetracking")})
	p.group.Defer("issue tracker", func(context.Context) error { return issues.Close() })
	builds, err := newBuildRunner(o.Agent.Builds, o, o.Logger.With("component", "builds"))
	if err != nil {
		return nil, err
	}
	// The Claude Code harness reaches the same tools over MCP on the local
	// proxy's listener; the harness, made below, ties each call to its turn.
	var (
		proxy    *localproxy.Proxy
		resolver atomic.Pointer[claudecode.Harness]
		endpoint *workermcp.Handler
		lpOpts   = &localproxy.Options{Logger: o.Logger.With("component", "localproxy"), TracerProvider: tel.TracerProvider(),
			Turn: func(id string) trace.SpanContext {
				if w := turns.Load(); w != nil {
					return w.TurnSpan(id)
				}
				return trace.SpanContext{}
			}}
	)
	if o.Agent.Harness == claudecode.Name {
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
			Logger: o.Logger.With("component", "worker-mcp"),
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
	p.LocalProxy = lp
	p.group.Defer("local proxy", func(ctx context.Context) error {
		if err := lp.Shutdown(ctx); !graceOver(err) {
			return err
		}
		return nil
	})
	jails, err := startJails(o, lp)
	if err != nil {
		return nil, err
	}
	p.jails = jails
	p.group.Defer("sandbox", func(ctx context.Context) error { jails.close(ctx); return nil })

	// The servers a workspace declares in .mcp.json, as far as the
	// allow-list permits; Close stops them, after the turns.
	mcpSource := mcpservers.New(&mcpservers.Options{AllowList: mcpAllow, Logger: o.Logger.With("component", "mcp-servers")})
	p.group.Defer("MCP servers", func(context.Context) error { mcpSource.Close(); return nil })
	h := native.New(client, &native.Options{
		Model:          o.Agent.Model,
		Tools:          tools.Default(&tools.Options{Builds: builds}),
		Policy:         policy,
		ToolSources:    append([]native.ToolSource{issues}, mcpSource),
		Logger:         o.Logger.With("component", "harness"),
		TracerProvider: tel.TracerProvider(), MeterProvider: tel.MeterProvider(),
	})
	selected, cc, err := selectHarness(o, h, lp, endpoint)
	if err != nil {
		return nil, err
	}
	if cc != nil {
		resolver.Store(cc)
		// After the turns: stops every CLI process.
		p.group.Defer("Claude Code", func(context.Context) error { cc.Close(); return nil })
	}
	if o.WorkerID == "" {
		o.WorkerID, _ = os.Hostname()
		o.WorkerID += "-" + strconv.Itoa(os.Getpid())
	}
	// The listener before the session store: among replicas, the port it
	// got is part of the address written into every lease.
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, err
	}
	served := false
	defer func() {
		if !served {
			ln.Close()
		}
	}()
	storeOpts := &sessionstore.Options{Holder: o.WorkerID, LeaseTTL: o.LeaseTTL}
	addr, replicas, err := joinReplicas(o, ln.Addr(), storeOpts)
	if err != nil {
		return nil, err
	}
	sessions, err := sessionstore.New(filepath.Join(o.ClaudeConfigDir, "projects"), storeOpts)
	if err != nil {
		return nil, err
	}
	w, err := worker.New(o.Tenant, o.Env, worker.CommandKey{ID: commandKey.ID, Key: commandKey.Secret}, sessions, o.WorkspaceRoot, selected, &worker.Options{
		WorkerID: o.WorkerID,
		Reporter: reporter, Logger: o.Logger.With("component", "worker"),
		Notices:         append(slices.Clone(o.Notices), jails.notices()...),
		Jail:            jails.jail,
		CommandKeys:     commandKeys,
		MaxRunningTurns: o.Agent.MaxRunningTurns,
		TracerProvider:  tel.TracerProvider(),
		Replicas:        replicas, Addr: addr, RebalanceIdle: o.RebalanceIdle,
	})
	if err != nil {
		return nil, err
	}
	p.Worker = w
	turns.Store(w)
	if replicas != nil {
		// The first beat before the first command: among replicas a
		// session is written only under the beats' cover (Heartbeat).
		if err := replicas.Publish(w.ReplicaEntry); err != nil {
			w.Shutdown(ctx) // its maintenance loop runs from New on; nothing is open yet
			return nil, fmt.Errorf("publishing this replica in the registry: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", workerMetrics(w, o.Logger))
	mux.Handle("/metrics", httpapi.MethodNotAllowed(o.Logger, http.MethodGet))
	mux.Handle("/", httpapi.BodyDeadline(0, w.Handler()))
	wh := readiness.Handler(workerReadiness(o, identityReadable), mux)
	o.Logger.Info("turns run at once at the most; more are refused with worker_busy", "max_running_turns", w.MaxRunningTurns())
	if httpapi.LoopbackHost(o.Listen) {
		// On loopback (talkide dev) the unsigned /healthz would answer a
		// page that rebinds a name of its own to 127.0.0.1; the control-plane
		// calls a loopback worker by a loopback address.
		wh = httpapi.LoopbackOnly(o.Logger.With("component", "worker"), wh)
	}
	p.HTTP, served = serve(&p.group, "command API", ln, wh, o.Logger, false), true
	if replicas != nil {
		// Stopped after the worker's drain (the parts stop in reverse):
		// the entry says draining while the last turns run, and is removed
		// once they are over.
		p.group.Go("replica registry", func(ctx context.Context) error { return replicas.Run(ctx, w.ReplicaEntry) })
		o.Logger.Info("routing among the tenant-env's replicas", "holder", o.WorkerID, "addr", addr)
	}
	// First at a stop, while the command API still serves: no new turns,
	// the running ones finish within the grace.
	p.group.Defer("worker", w.Shutdown)
	if err := w.FlushOutboxes(ctx); err != nil {
		o.Logger.Warn("could not scan the session volume for undelivered reports", "err", err)
	}
	return p, nil
}

// joinReplicas returns, when o advertises a host, this replica's address
// (the host on the port bound) and its registry on the session volume, and
// sets store's address and beats to them: the leases it takes name the
// address, and are taken over by peers when its beats stop.
func joinReplicas(o WorkerConfig, bound net.Addr, store *sessionstore.Options) (string, *replicaset.Registry, error) {
	if o.AdvertiseHost == "" {
		return "", nil, nil
	}
	_, port, err := net.SplitHostPort(bound.String())
	if err != nil {
		return "", nil, err
	}
	addr := "http://" + net.JoinHostPort(o.AdvertiseHost, port)
	if err := replicaset.ValidateAddr(addr); err != nil {
		return "", nil, fmt.Errorf("--advertise-host %q: %w", o.AdvertiseHost, err)
	}
	beats := new(sessionstore.Heartbeat)
	reg, err := replicaset.New(filepath.Join(o.ClaudeConfigDir, "replicas"), o.WorkerID,
		&replicaset.Options{Interval: o.ReplicaInterval, Logger: o.Logger.With("component", "replicas"), OnBeat: beats.Beat})
	if err != nil {
		return "", nil, fmt.Errorf("worker id %q: %w", o.WorkerID, err)
	}
	store.Addr, store.Heartbeat, store.PeerBeatEnds = addr, beats, reg.BeatEnds
	return addr, reg, nil
}

// identitySource returns the source of the identity token and its
// readiness check; a token file is watched in the group.
func (p *Worker) identitySource(o WorkerConfig) (get func() (string, error), readable func() error, err error) {
	switch {
	case o.IdentityTokenFile != "":
		// A rotation's new Secret reaches the file by the kubelet's ..data
		// swap, and a read during the swap falls back to the last good
		// token.
		f, err := secretfile.Open(o.IdentityTokenFile, &secretfile.Options{Logger: o.Logger})
		if err != nil {
			return nil, nil, err
		}
		p.group.Go("identity token watch", f.Run)
		return f.Get, f.Healthy, nil
	case o.IdentityToken != "":
		tok := o.IdentityToken
		return func() (string, error) { return tok, nil }, func() error { return nil }, nil
	}
	return nil, nil, errors.New("an identity token is required: --identity-token-file or TALKIDE_WORKER_IDENTITY_TOKEN")
}

// commandKeys returns the command key to start with and the keyring that
// verifies commands; a key file is watched in the group.
func (p *Worker) commandKeys(o WorkerConfig) (trust.Key, *trust.Keyring, error) {
	if o.CommandKeyFile == "" {
		if len(o.CommandKey.Secret) == 0 {
			return trust.Key{}, nil, trust.ErrNoCommandKey
		}
		ring, err := trust.NewRotatingKeyring([]trust.Key{o.CommandKey})
		return o.CommandKey, ring, err
	}
	kf, err := trust.OpenKeyFile(o.CommandKeyFile, o.CommandKeyID, o.CommandKeyGrace, o.Logger)
	if err != nil {
		return trust.Key{}, nil, err
	}
	p.group.Go("command key watch", kf.File.Run)
	return kf.First, kf.Ring, nil
}

// readAgentFiles reads the tool policy and the MCP allow-list the agent
// configuration names.
func readAgentFiles(a AgentConfig) (*tools.Policy, *mcpservers.AllowList, error) {
	policy, err := parseFile(a.ToolPolicy, "tool policy", tools.ParsePolicy)
	if err != nil {
		return nil, nil, err
	}
	mcpAllow, err := parseFile(a.MCPAllow, "MCP allow-list", mcpservers.ParseAllowList)
	if err != nil {
		return nil, nil, err
	}
	return policy, mcpAllow, nil
}

// parseFile reads and parses the file at path; what names its contents in
// errors. An empty path names no file: nil.
func parseFile[T any](path, what string, parse func([]byte) (*T, error)) (*T, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	v, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	return v, nil
}

// IdentityToken is the identity token the worker mints with now: a
// rotated file's new token once it has been read.
func (p *Worker) IdentityToken() (string, error) { return p.identity() }

// Sandbox is the sandbox every agent command runs in.
func (p *Worker) Sandbox() *sandbox.Sandbox { return p.jails.sb }

// Stop stops taking commands, lets running turns finish within ctx, then
// stops the rest in reverse and delivers the last reports.
func (p *Worker) Stop(ctx context.Context) error { return p.group.Stop(ctx) }

// Fatal delivers the error of a part that failed while the worker ran.
func (p *Worker) Fatal() <-chan error { return p.group.Fatal() }

// RunWorker starts a worker, calls started with it, and runs it until ctx
// ends or a part fails; then it stops it within WorkerGrace.
func RunWorker(ctx context.Context, o WorkerConfig, started func(*Worker)) error {
	p, err := StartWorker(ctx, o)
	return run(ctx, o.Logger, WorkerGrace, p, err, started)
}

// workerReadiness are the worker's /readyz checks: the session volume
// takes writes, the identity token is readable, the control-plane answers.
func workerReadiness(o WorkerConfig, tokenReadable func() error) map[string]readiness.Check {
	return map[string]readiness.Check{
		"session volume writable": readiness.Writable(o.ClaudeConfigDir),
		"token readable":          func(context.Context) error { return tokenReadable() },
		"control-plane reachable": readiness.Reachable(&http.Client{Timeout: 2 * time.Second}, o.ControlPlaneURL),
	}
}

// selectHarness returns the harness the configuration names: the native
// one (h) or a Claude Code harness (cc) whose CLIs use the local proxy lp.
func selectHarness(o WorkerConfig, h *native.Harness, lp *localproxy.Server, endpoint *workermcp.Handler) (harness.Harness, *claudecode.Harness, error) {
	switch o.Agent.Harness {
	case "", native.Name:
		return h, nil, nil
	case claudecode.Name:
		bin, err := exec.LookPath(o.Agent.ClaudeCodeBin)
		if err != nil {
			return nil, nil, fmt.Errorf("--harness claude-code: the Claude Code CLI (--claude-code-bin %q) was not found: %w", o.Agent.ClaudeCodeBin, err)
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
			Model:      o.Agent.Model,
			MCPServers: servers,
			Logger:     o.Logger.With("component", "harness"),
		})
		if err != nil {
			return nil, nil, err
		}
		return cc, cc, nil
	default:
		return nil, nil, fmt.Errorf("--harness %q: want %s or %s", o.Agent.Harness, native.Name, claudecode.Name)
	}
}
