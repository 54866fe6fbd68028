package main

import (
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/talkide/platform/internal/admincmd"
	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/secretenv"
	"github.com/talkide/platform/internal/worker"
)

// registerAgentFlags registers the flags that shape the agent into a;
// talkide dev and talkide worker share them.
func registerAgentFlags(fs *pflag.FlagSet, a *roles.AgentConfig) {
	fs.StringVar(&a.Model, "model", "", "model id (default: the harness's default; docs/harnesses.md)")
	fs.StringVar(&a.Harness, "harness", "native", "agent harness: native (in-process) or claude-code (the Claude Code CLI; docs/harnesses.md)")
	fs.StringVar(&a.ClaudeCodeBin, "claude-code-bin", "claude", "the Claude Code CLI for --harness claude-code")
	fs.StringVar(&a.ToolPolicy, "tool-policy", "", "JSON file of tool allow/deny rules checked before every tool call (docs/tools.md)")
	fs.StringVar(&a.MCPAllow, "mcp-allow", "", "JSON file of the MCP servers a workspace's .mcp.json may start (docs/mcp.md); default none")
	fs.StringVar(&a.Sandbox, "sandbox", "auto", "how agent commands are confined (docs/sandbox.md): auto (every layer this machine supports; refuse commands when none can be applied), landlock (the first layer only), none (no sandbox: a warning at start and in every session)")
	fs.StringSliceVar(&a.SandboxReadOnly, "sandbox-read-only", nil, "more paths agent commands may read and execute, beyond the system's (/usr, /opt, the parts of /etc a userland reads: talkide sandbox check lists them), such as a toolchain elsewhere or another file of /etc; repeat or separate with commas")
	fs.Float64Var(&a.SandboxCPUs, "sandbox-cpus", 0, "each agent command's CPU ceiling, in CPUs (1.5: one and a half), where it gets a cpu cgroup of its own; commands share the CPU equally either way (0: no ceiling; docs/sandbox.md)")
	fs.StringVar(&a.SandboxHelper, "sandbox-helper", "", "the sandbox's helper, started for every agent command: a talkide-sandbox binary built from the same source (default: talkide-sandbox beside this executable when there is one, else this executable)")
	fs.StringVar(&a.EgressAllow, "egress-allow", "", "JSON file of the destinations agent commands may reach through the egress proxy (docs/egress.md); default none")
	fs.IntVar(&a.MaxRunningTurns, "max-running-turns", 0, "turns the worker runs at once; a message beyond is refused before its turn starts (worker_busy, Retry-After), never lost (0: derived from the open-file limit, "+strconv.Itoa(worker.DescriptorsPerTurn)+" descriptors a turn; negative: no bound; docs/operations.md)")
	cli.BindEnv(fs, "model", "harness", "claude-code-bin", "tool-policy", "mcp-allow", "sandbox", "sandbox-read-only", "sandbox-cpus", "sandbox-helper", "egress-allow", "max-running-turns")
	registerBuildFlags(fs, &a.Builds)
}

func newControlPlaneCmd(std stdio) *cobra.Command {
	var (
		o          roles.ControlPlaneConfig
		streams    streamFlags
		dataDir    string
		logs       logFlags
		kubernetes bool
		gwFlags    gatewayFlags
		kf         admincmd.KubeFlags
	)
	cmd := &cobra.Command{
		Use:   "controlplane",
		Short: "Run the control-plane: browser API, gateway-proxy, mint endpoint, worker reports, operator API",
		Long: `Run the control-plane: the browser API, the gateway-proxy (the only holder of
ANTHROPIC_API_KEY), the WorkerToken mint endpoint, the worker report endpoints
and the operator API: on one listener, or on --listen (public),
--internal-listen (what workers and operators call) and --metrics-listen.
Without --local-user the browser API authenticates with API tokens (talkide
admin api-token), an OpenID Connect login (--oidc-*) or a trusted proxy's
header (--trusted-proxies). Without ANTHROPIC_API_KEY the gateway answers 503.
See docs/operations.md and docs/accounts.md.`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := logs.logger(cmd, std.err)
			if err != nil {
				return err
			}
			if o.Bounds, err = bounds(cmd, streams, gwFlags); err != nil {
				return err
			}
			roles.PrepareProcess(logger)
			o.Logger = logger
			if o.Telemetry, err = telemetryConfig(); err != nil {
				return err
			}
			o.APIKey = os.Getenv("ANTHROPIC_API_KEY")
			if o.APIKey == "" {
				logger.Warn("ANTHROPIC_API_KEY is not set: the gateway answers 503")
			}
			dir := roles.ControlPlaneDir(dataDir)
			o.DBPath, o.SecretsPath = dir.Database(), dir.Secrets()
			if kubernetes {
				if o.Kubernetes, err = kf.Provisioner(); err != nil {
					return err
				}
			}
			ctx, _, stop := cli.UntilSignal(cmd.Context(), std.signals)
			defer stop()
			return roles.RunControlPlane(ctx, o, func(cp *roles.ControlPlane) {
				logger.Info("control-plane serving", "url", cp.HTTP.URL())
				if cp.Internal != nil {
					logger.Info("control-plane internal endpoints serving", "url", cp.Internal.URL())
				}
				if cp.Metrics != nil {
					logger.Info("control-plane metrics serving", "url", cp.Metrics.URL())
				}
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:7878", "HOST:PORT to serve on")
	fs.StringVar(&dataDir, "data-dir", admincmd.DefaultControlPlaneDataDir, "directory for the secrets file and the default SQLite database")
	fs.StringVar(&o.Database, "database", "", "the store: a postgres://… or postgresql://… URL (password better in PGPASSWORD or ~/.pgpass), or sqlite:PATH or a file path (default DATA-DIR/controlplane.db)")
	fs.StringVar(&o.Upstream, "anthropic-url", "https://api.anthropic.com", "Anthropic API base URL")
	fs.StringVar(&o.LocalUser, "local-user", "", "serve the browser API as this one user without credentials (loopback only)")
	fs.StringVar(&o.Tenant, "default-tenant", "local", "tenant of new conversations")
	fs.StringVar(&o.Env, "default-env", "dev", "env of new conversations")
	fs.StringVar(&o.Prices, "prices", "", "JSON file of model prices overriding the built-in list, same shape (docs/budgets.md)")
	fs.StringVar(&o.OperatorTokens, "operator-tokens", "", "file of the operator tokens' hashes that the operator API /api/admin accepts, re-read when it changes (default DATA-DIR/operator-tokens; kept by talkide admin operator-token)")
	fs.StringVar(&o.InternalListen, "internal-listen", "", "HOST:PORT for what workers and operators call (gateway, mint, reports, issues, operator API); default: on --listen. Set it, and --listen answers 404 there (docs/accounts.md)")
	fs.StringVar(&o.MetricsListen, "metrics-listen", "", "HOST:PORT for /metrics; default: on --listen")
	cli.BindEnv(fs, "listen", "data-dir", "database", "anthropic-url", "local-user", "default-tenant", "default-env", "prices", "operator-tokens", "internal-listen", "metrics-listen")
	addAuthFlags(fs, &o.Auth)
	registerStreamFlags(fs, &streams)
	registerGatewayFlags(fs, &gwFlags)
	fs.BoolVar(&kubernetes, "kubernetes", false, "provision each tenant-env's worker on Kubernetes: reconcile the store's tenant-envs into namespaces (docs/kubernetes.md)")
	cli.BindEnv(fs, "kubernetes")
	kf.Add(fs)
	logs.add(fs)
	return cmd
}

func newWorkerCmd(std stdio) *cobra.Command {
	var (
		o    roles.WorkerConfig
		logs logFlags
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a tenant-env's agent worker",
		Long: `Run the agent worker of one tenant-env: the signed command API the
control-plane calls, the agent loop of each conversation, the session store on
CLAUDE_CONFIG_DIR, and the LocalGatewayProxy. It reaches the model only through
the control-plane at TALKIDE_GATEWAY_BASE_URL, with WorkerTokens minted by its
identity token; it refuses to start with ANTHROPIC_API_KEY in its environment.`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := logs.logger(cmd, std.err)
			if err != nil {
				return err
			}
			o.Logger = logger
			roles.PrepareProcess(logger)
			if err := o.Agent.Check(); err != nil {
				return err
			}
			if err := workerEnv(&o); err != nil {
				return err
			}
			if o.Telemetry, err = telemetryConfig(); err != nil {
				return err
			}
			ctx, _, stop := cli.UntilSignal(cmd.Context(), std.signals)
			defer stop()
			return roles.RunWorker(ctx, o, func(w *roles.Worker) {
				logger.Info("worker serving", "url", w.HTTP.URL(), "localproxy", w.LocalProxy.URL(), "tenant", o.Tenant, "env", o.Env)
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Listen, "listen", ":8080", "HOST:PORT to serve the command API on")
	fs.StringVar(&o.Tenant, "tenant", "", "tenant this worker serves (required)")
	fs.StringVar(&o.Env, "env", "", "env this worker serves (required)")
	fs.StringVar(&o.IdentityTokenFile, "identity-token-file", "", "file holding the identity token, re-read on every mint (default: $TALKIDE_WORKER_IDENTITY_TOKEN)")
	fs.StringVar(&o.CommandKeyFile, "command-key-file", "", "file holding the command signing key, ID:BASE64 or bare base64, watched for rotations (default: $TALKIDE_WORKER_COMMAND_KEY)")
	fs.StringVar(&o.CommandKeyID, "command-key-id", "c1", "id of a bare base64 command signing key (a key given as ID:BASE64 names its own)")
	fs.DurationVar(&o.CommandKeyGrace, "command-key-grace", 10*time.Minute, "how long the previous command key still verifies after --command-key-file changes")
	fs.StringVar(&o.WorkspaceRoot, "workspaces", "", "directory of the conversations' workspaces (default: $CLAUDE_CONFIG_DIR/../workspaces)")
	fs.StringVar(&o.AdvertiseHost, "advertise-host", "", "host (a pod's IP) the tenant-env's other worker replicas reach this one at, on the --listen port: with it the replicas share the session volume's conversations, each command served by, or forwarded to, the replica that holds its conversation (docs/sessions.md); without it this is the only replica")
	cli.BindEnv(fs, "listen", "tenant", "env", "identity-token-file", "command-key-file", "command-key-id", "command-key-grace", "workspaces", "advertise-host")
	registerAgentFlags(fs, &o.Agent)
	logs.add(fs)
	return cmd
}

// workerEnv completes o from the environment the seam names and the
// secrets handed over from it at start (internal/secretenv), which
// nothing the agent runs can then inherit.
func workerEnv(o *roles.WorkerConfig) error {
	err := o.FromEnv(roles.WorkerEnv{
		GatewayBaseURL:  os.Getenv("TALKIDE_GATEWAY_BASE_URL"),
		ClaudeConfigDir: os.Getenv("CLAUDE_CONFIG_DIR"),
		IdentityToken:   secretenv.Get("TALKIDE_WORKER_IDENTITY_TOKEN"),
		CommandKey:      secretenv.Get("TALKIDE_WORKER_COMMAND_KEY"),
		HasAPIKey:       os.Getenv("ANTHROPIC_API_KEY") != "",
	})
	os.Unsetenv("TALKIDE_WORKER_IDENTITY_TOKEN") // a process that did not re-execute (a test)
	os.Unsetenv("TALKIDE_WORKER_COMMAND_KEY")
	return err
}
