package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/sandbox"
	"github.com/talkide/platform/internal/secretfile"
	"github.com/talkide/platform/internal/trust"
)

// agentFlags shape the agent; talkide dev and talkide worker share them.
type agentFlags struct {
	model, harness, claudeBin, toolPolicy, mcpAllow string
	sandbox                                         string
	sandboxReadOnly                                 []string
	sandboxHelper                                   string
	egressAllow                                     string
	builds                                          buildFlags
}

// apply copies the flags into o, checking the sandbox mode (empty:
// auto).
func (a *agentFlags) apply(o *workerOptions) error {
	mode := sandbox.ModeAuto
	if a.sandbox != "" {
		var err error
		if mode, err = sandbox.ParseMode(a.sandbox); err != nil {
			return contract.Invalid(nil, "sandbox", "%q: %v", a.sandbox, err)
		}
	}
	o.model, o.harness, o.claudeCodeBin, o.toolPolicy, o.mcpAllow = a.model, a.harness, a.claudeBin, a.toolPolicy, a.mcpAllow
	o.sandbox, o.sandboxHelper, o.egressAllow = mode, a.sandboxHelper, a.egressAllow
	if err := a.builds.check(); err != nil {
		return err
	}
	o.builds = a.builds
	if len(a.sandboxReadOnly) > 0 {
		o.sandboxReadOnly = append(slices.Clone(sandbox.DefaultReadOnly), a.sandboxReadOnly...)
	}
	return nil
}

func registerAgentFlags(fs *pflag.FlagSet, a *agentFlags) {
	fs.StringVar(&a.model, "model", "", "model id (default: the harness's default; docs/harnesses.md)")
	fs.StringVar(&a.harness, "harness", "native", "agent harness: native (in-process) or claude-code (the Claude Code CLI; docs/harnesses.md)")
	fs.StringVar(&a.claudeBin, "claude-code-bin", "claude", "the Claude Code CLI for --harness claude-code")
	fs.StringVar(&a.toolPolicy, "tool-policy", "", "JSON file of tool allow/deny rules checked before every tool call (docs/tools.md)")
	fs.StringVar(&a.mcpAllow, "mcp-allow", "", "JSON file of the MCP servers a workspace's .mcp.json may start (docs/mcp.md); default none")
	fs.StringVar(&a.sandbox, "sandbox", "auto", "how agent commands are confined (docs/sandbox.md): auto (every layer this machine supports; refuse commands when none can be applied), landlock (the first layer only), none (no sandbox: a warning at start and in every session)")
	fs.StringSliceVar(&a.sandboxReadOnly, "sandbox-read-only", nil, "more paths agent commands may read and execute, beyond the system's (/usr, /opt, the parts of /etc a userland reads: talkide sandbox check lists them), such as a toolchain elsewhere or another file of /etc; repeat or separate with commas")
	fs.StringVar(&a.sandboxHelper, "sandbox-helper", "", "the sandbox's helper, started for every agent command: a talkide-sandbox binary built from the same source (default: talkide-sandbox beside this executable when there is one, else this executable)")
	fs.StringVar(&a.egressAllow, "egress-allow", "", "JSON file of the destinations agent commands may reach through the egress proxy (docs/egress.md); default none")
	bindEnv(fs, "model", "harness", "claude-code-bin", "tool-policy", "mcp-allow", "sandbox", "sandbox-read-only", "sandbox-helper", "egress-allow")
	registerBuildFlags(fs, &a.builds)
}

// controlPlaneGrace is how long the control-plane lets requests finish
// when asked to stop.
const controlPlaneGrace = 15 * time.Second

func newControlPlaneCmd(std stdio) *cobra.Command {
	var (
		o          cpOptions
		dataDir    string
		logs       logFlags
		kubernetes bool
		gwFlags    gatewayFlags
		kf         kubeFlags
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
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := logs.logger(cmd, std.err)
			if err != nil {
				return err
			}
			if err := undumpable(); err != nil {
				logger.Warn("the process stays dumpable: its /proc files are readable to its own user", "err", err)
			}
			if err := o.streams.check(cmd); err != nil {
				return err
			}
			if o.maxBody, o.maxBuffered, err = gwFlags.options(cmd); err != nil {
				return err
			}
			raiseFileLimit(logger)
			if o.localUser != "" && !httpapi.LoopbackHost(o.listen) {
				return usageErrorf(cmd, "--local-user needs a loopback --listen address")
			}
			o.logger = logger
			o.apiKey = os.Getenv("ANTHROPIC_API_KEY")
			if o.apiKey == "" {
				logger.Warn("ANTHROPIC_API_KEY is not set: the gateway answers 503")
			}
			o.dbPath = filepath.Join(dataDir, "controlplane.db")
			o.secretsPath = filepath.Join(dataDir, "controlplane-secrets.json")
			ctx, _, stop := untilSignal(cmd.Context(), std.signals)
			defer stop()
			cp, err := startControlPlane(ctx, o)
			if err != nil {
				return err
			}
			logger.Info("control-plane serving", "url", cp.http.url())
			if cp.internal != nil {
				logger.Info("control-plane internal endpoints serving", "url", cp.internal.url())
			}
			if cp.metricsL != nil {
				logger.Info("control-plane metrics serving", "url", cp.metricsL.url())
			}
			if kubernetes {
				stopProvisioner, err := runProvisioner(ctx, &kf, cp, o)
				if err != nil {
					return errors.Join(err, cp.shutdown(context.WithoutCancel(ctx)))
				}
				defer stopProvisioner()
			}
			return serveUntil(ctx, logger, controlPlaneGrace, cp.shutdown)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.listen, "listen", "127.0.0.1:7878", "HOST:PORT to serve on")
	fs.StringVar(&dataDir, "data-dir", defaultCPDataDir, "directory for the secrets file and the default SQLite database")
	fs.StringVar(&o.database, "database", "", "the store: a postgres://… or postgresql://… URL (password better in PGPASSWORD or ~/.pgpass), or sqlite:PATH or a file path (default DATA-DIR/controlplane.db)")
	fs.StringVar(&o.upstream, "anthropic-url", "https://api.anthropic.com", "Anthropic API base URL")
	fs.StringVar(&o.localUser, "local-user", "", "serve the browser API as this one user without credentials (loopback only)")
	fs.StringVar(&o.tenant, "default-tenant", "local", "tenant of new conversations")
	fs.StringVar(&o.env, "default-env", "dev", "env of new conversations")
	fs.StringVar(&o.prices, "prices", "", "JSON file of model prices overriding the built-in list, same shape (docs/budgets.md)")
	fs.StringVar(&o.operatorTokens, "operator-tokens", "", "file of the operator tokens' hashes that the operator API /api/admin accepts, re-read when it changes (default DATA-DIR/operator-tokens; kept by talkide admin operator-token)")
	fs.StringVar(&o.internalListen, "internal-listen", "", "HOST:PORT for what workers and operators call (gateway, mint, reports, issues, operator API); default: on --listen. Set it, and --listen answers 404 there (docs/accounts.md)")
	fs.StringVar(&o.metricsListen, "metrics-listen", "", "HOST:PORT for /metrics; default: on --listen")
	bindEnv(fs, "listen", "data-dir", "database", "anthropic-url", "local-user", "default-tenant", "default-env", "prices", "operator-tokens", "internal-listen", "metrics-listen")
	o.auth.add(fs)
	registerStreamFlags(fs, &o.streams)
	registerGatewayFlags(fs, &gwFlags)
	fs.BoolVar(&kubernetes, "kubernetes", false, "provision each tenant-env's worker on Kubernetes: reconcile the store's tenant-envs into namespaces (docs/kubernetes.md)")
	bindEnv(fs, "kubernetes")
	kf.add(fs)
	logs.add(fs)
	return cmd
}

// workerGrace is how long a worker lets running turns finish when asked to
// stop; the Deployment's terminationGracePeriodSeconds must exceed it.
const workerGrace = 60 * time.Second

func newWorkerCmd(std stdio) *cobra.Command {
	var (
		o                  workerOptions
		tokenFile, keyFile string
		agent              agentFlags
		logs               logFlags
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a tenant-env's agent worker",
		Long: `Run the agent worker of one tenant-env: the signed command API the
control-plane calls, the agent loop of each conversation, the session store on
CLAUDE_CONFIG_DIR, and the LocalGatewayProxy. It reaches the model only through
the control-plane at TALKIDE_GATEWAY_BASE_URL, with WorkerTokens minted by its
identity token; it refuses to start with ANTHROPIC_API_KEY in its environment.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := logs.logger(cmd, std.err)
			if err != nil {
				return err
			}
			o.logger = logger
			if err := undumpable(); err != nil {
				logger.Warn("the process stays dumpable: its /proc files are readable to its own user", "err", err)
			}
			raiseFileLimit(logger)
			if err := agent.apply(&o); err != nil {
				return err
			}
			if err := workerEnv(&o, tokenFile, keyFile); err != nil {
				return err
			}
			ctx, _, stop := untilSignal(cmd.Context(), std.signals)
			defer stop()
			w, err := startWorker(o)
			if err != nil {
				return err
			}
			logger.Info("worker serving", "url", w.http.url(), "localproxy", w.localProxy.URL(), "tenant", o.tenant, "env", o.env)
			return serveUntil(ctx, logger, workerGrace, w.shutdown)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.listen, "listen", ":8080", "HOST:PORT to serve the command API on")
	fs.StringVar(&o.tenant, "tenant", "", "tenant this worker serves (required)")
	fs.StringVar(&o.env, "env", "", "env this worker serves (required)")
	fs.StringVar(&tokenFile, "identity-token-file", "", "file holding the identity token, re-read on every mint (default: $TALKIDE_WORKER_IDENTITY_TOKEN)")
	fs.StringVar(&keyFile, "command-key-file", "", "file holding the command signing key, ID:BASE64 or bare base64, watched for rotations (default: $TALKIDE_WORKER_COMMAND_KEY)")
	fs.StringVar(&o.commandKeyID, "command-key-id", "c1", "id of a bare base64 command signing key (a key given as ID:BASE64 names its own)")
	fs.DurationVar(&o.commandKeyGrace, "command-key-grace", 10*time.Minute, "how long the previous command key still verifies after --command-key-file changes")
	fs.StringVar(&o.workspaceRoot, "workspaces", "", "directory of the conversations' workspaces (default: $CLAUDE_CONFIG_DIR/../workspaces)")
	bindEnv(fs, "listen", "tenant", "env", "identity-token-file", "command-key-file", "command-key-id", "command-key-grace", "workspaces")
	registerAgentFlags(fs, &agent)
	logs.add(fs)
	return cmd
}

// workerEnv completes o from the environment the seam names
// (TALKIDE_GATEWAY_BASE_URL, CLAUDE_CONFIG_DIR) and reads the worker's
// secrets: from files (--identity-token-file, --command-key-file, which a
// rotation updates in place), or handed over from the environment at start
// (secretenv.go), which nothing the agent runs can then inherit.
func workerEnv(o *workerOptions, tokenFile, keyFile string) error {
	if o.tenant == "" || o.env == "" {
		return errors.New("--tenant and --env are required")
	}
	if os.Getenv("ANTHROPIC_API_KEY") != "" {
		return errors.New("ANTHROPIC_API_KEY is set in the worker's environment; the worker must never hold it (remove it)")
	}
	o.cpURL = os.Getenv("TALKIDE_GATEWAY_BASE_URL")
	if o.cpURL == "" {
		return errors.New("TALKIDE_GATEWAY_BASE_URL (the control-plane's base URL) is required")
	}
	o.claudeConfigDir = os.Getenv("CLAUDE_CONFIG_DIR")
	if o.claudeConfigDir == "" {
		return errors.New("CLAUDE_CONFIG_DIR (the session volume) is required")
	}
	if o.workspaceRoot == "" {
		o.workspaceRoot = filepath.Join(filepath.Dir(filepath.Clean(o.claudeConfigDir)), "workspaces")
	}
	switch {
	case tokenFile != "":
		// Watched for the process's life: a rotation's new Secret reaches
		// the file by the kubelet's ..data swap, and a read during the swap
		// falls back to the last good token.
		f, err := secretfile.Watch(context.Background(), tokenFile, &secretfile.Options{Logger: o.logger})
		if err != nil {
			return err
		}
		o.identity, o.identityReadable = f.Get, f.Healthy
	case secret("TALKIDE_WORKER_IDENTITY_TOKEN") != "":
		tok := secret("TALKIDE_WORKER_IDENTITY_TOKEN")
		o.identity = func() (string, error) { return tok, nil }
	default:
		return errors.New("an identity token is required: --identity-token-file or TALKIDE_WORKER_IDENTITY_TOKEN")
	}
	if err := workerCommandKeys(o, keyFile); err != nil {
		return err
	}
	os.Unsetenv("TALKIDE_WORKER_IDENTITY_TOKEN") // a process that did not re-execute (a test)
	os.Unsetenv("TALKIDE_WORKER_COMMAND_KEY")
	return nil
}

// serveUntil waits until ctx ends (the first signal), then stops what
// serves, giving it grace to finish what runs.
func serveUntil(ctx context.Context, log *slog.Logger, grace time.Duration, shutdown func(context.Context) error) error {
	<-ctx.Done()
	log.Info("shutting down", "grace", grace)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	return shutdown(sctx)
}

// errNoCommandKey names where the worker's command key comes from, and
// never what was there.
var errNoCommandKey = errors.New("a command key (ID:BASE64, or base64 of at least 32 bytes) is required: --command-key-file or TALKIDE_WORKER_COMMAND_KEY")

// workerCommandKeys reads the command key into o.commandKeys. From a file,
// the file is watched: when a rotation swaps in a new key, it verifies and
// signs at once and the previous one keeps verifying for
// --command-key-grace, since the control-plane signs with it until its
// replacement has reached every worker.
func workerCommandKeys(o *workerOptions, keyFile string) error {
	if o.commandKeyGrace <= 0 {
		return errors.New("--command-key-grace must be positive")
	}
	if keyFile == "" {
		k, err := trust.ParseKey(secret("TALKIDE_WORKER_COMMAND_KEY"), o.commandKeyID)
		if err != nil {
			return errNoCommandKey
		}
		o.commandKeyID, o.commandKey = k.ID, k.Secret
		o.commandKeys, err = trust.NewRotatingKeyring([]trust.Key{k})
		return err
	}
	logger := o.logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var ring *trust.Keyring
	ready := make(chan struct{}) // ring is set: a change can come before
	f, err := secretfile.Watch(context.Background(), keyFile, &secretfile.Options{Logger: logger, OnChange: func(text string) {
		<-ready
		k, err := trust.ParseKey(text, o.commandKeyID)
		if err != nil {
			logger.Warn("the command key file changed but holds no valid key; keeping the keys in use", "err", err)
			return
		}
		now := time.Now()
		if err := ring.Set(trust.Rotated(ring.Keys(), k, now.Add(o.commandKeyGrace), now)); err != nil {
			logger.Warn("the command key file changed but its key cannot be installed; keeping the keys in use", "err", err)
			return
		}
		logger.Info("command key rotated", "key_id", k.ID, "previous_verifies_for", o.commandKeyGrace)
	}})
	if err != nil {
		return err
	}
	text, _ := f.Get()
	k, err := trust.ParseKey(text, o.commandKeyID)
	if err != nil {
		return errNoCommandKey
	}
	o.commandKeyID, o.commandKey = k.ID, k.Secret
	if ring, err = trust.NewRotatingKeyring([]trust.Key{k}); err != nil {
		return err
	}
	o.commandKeys = ring
	close(ready)
	return nil
}
