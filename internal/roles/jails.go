package roles

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/talkide/platform/internal/egress"
	"github.com/talkide/platform/internal/localproxy"
	"github.com/talkide/platform/internal/sandbox"
)

// jails is the worker's side of the sandbox: the sandbox itself, the
// egress proxy, and the unix sockets through which a sandbox without a
// network of its own reaches the proxies.
type jails struct {
	sb     *sandbox.Sandbox
	egress *egress.Server
	lp     *localproxy.Server
	runDir string // the proxies' sockets; private to the worker
	mode   sandbox.Mode
	// serving delivers what the egress proxy's Serve on its socket
	// returned; close waits for it.
	serving chan error
}

// startJails starts the sandbox and the egress proxy for o, beside the
// local proxy lp, and says at start-up which layers every agent command
// gets.
func startJails(o WorkerConfig, lp *localproxy.Server) (_ *jails, err error) {
	mode := o.Agent.mode
	log := o.Logger.With("component", "sandbox")
	var helper string
	if mode != sandbox.ModeNone {
		helper = SandboxHelper(o.Agent.SandboxHelper, log)
	}
	var readOnly []string // nil: sandbox.DefaultReadOnly
	if len(o.Agent.SandboxReadOnly) > 0 {
		readOnly = append(slices.Clone(sandbox.DefaultReadOnly), o.Agent.SandboxReadOnly...)
	}
	sb, err := sandbox.New(&sandbox.Options{Mode: mode, Helper: helper, ReadOnly: readOnly, Logger: log, PretendNoLandlock: o.PretendNoLandlock,
		Limits: sandbox.Limits{CPUs: o.Agent.SandboxCPUs}})
	if err != nil {
		if o.Agent.SandboxHelper != "" {
			return nil, fmt.Errorf("--sandbox-helper: %w", err)
		}
		return nil, err
	}
	j := &jails{sb: sb, lp: lp, mode: mode}
	defer func() {
		if err != nil {
			j.close(context.Background())
		}
	}()
	switch {
	case mode == sandbox.ModeNone:
		log.Warn("agent commands run WITHOUT a sandbox (--sandbox none): what the agent runs can read and reach everything the worker can")
	case sb.Unavailable() != nil:
		log.Error("agent commands are refused: no sandbox can be applied on this machine", "err", sb.Unavailable())
	default:
		log.Info("agent commands run in the sandbox", "mode", mode, "layers", sb.Layers())
	}
	// A short path: a unix socket's path has at most 107 bytes.
	if j.runDir, err = os.MkdirTemp("", "talkide-run-"); err != nil {
		return nil, err
	}
	if err := lp.ServeUnix(filepath.Join(j.runDir, "localproxy.sock")); err != nil {
		return nil, err
	}
	allow := &egress.AllowList{}
	if o.Agent.EgressAllow != "" {
		if allow, err = egress.LoadAllowList(o.Agent.EgressAllow); err != nil {
			return nil, fmt.Errorf("--egress-allow: %w", err)
		}
	}
	j.egress = egress.New(allow, lp.Capability, &egress.Options{
		Logger:        o.Logger.With("component", "egress"),
		AllowListName: "the worker's --egress-allow list",
	})
	if err := j.egress.Listen("127.0.0.1:0"); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", filepath.Join(j.runDir, "egress.sock"))
	if err != nil {
		return nil, err
	}
	j.serving = make(chan error, 1)
	go func() { j.serving <- j.egress.Serve(ln) }()
	log.Info("egress proxy serving", "allowed_destinations", allow.Len())
	return j, nil
}

// helperName is the helper binary (cmd/talkide-sandbox) the worker looks
// for beside its own executable.
const helperName = "talkide-sandbox"

// SandboxHelper returns the helper the sandbox starts for every command,
// and says at start-up which it is: flag when set (sandbox.New checks
// it); else talkide-sandbox beside exe, this executable, when it was
// built from the same code; else "", exe itself. The small binary
// starts a command milliseconds sooner, as it loads and initialises only
// the sandbox; re-executing talkide keeps "go run ./cmd/talkide dev"
// working with nothing else built.
func SandboxHelper(flag string, log *slog.Logger) string {
	return sandboxHelper(flag, executable(), log)
}

func sandboxHelper(flag, exe string, log *slog.Logger) string {
	if flag != "" {
		log.Info("sandbox helper: --sandbox-helper", "helper", flag)
		return flag
	}
	if exe == "" {
		return ""
	}
	beside := filepath.Join(filepath.Dir(exe), helperName)
	if fi, err := os.Stat(beside); err != nil || !fi.Mode().IsRegular() {
		log.Info("sandbox helper: this executable, re-executed for every command ("+helperName+" beside it would cost each command half the CPU)", "helper", exe)
		return ""
	}
	if err := sandbox.CheckHelper(beside); err != nil {
		log.Warn("sandbox helper: "+helperName+" beside this executable is not used; this executable is re-executed for every command instead", "err", err)
		return ""
	}
	log.Info("sandbox helper: "+helperName+" beside this executable", "helper", beside)
	return beside
}

// executable is this process's executable, or "" when it cannot be
// found (sandbox.New then says why).
func executable() string {
	exe, _ := os.Executable()
	return exe
}

// egressPort is the egress proxy's TCP port on 127.0.0.1.
func (j *jails) egressPort() int { return j.egress.Addr().(*net.TCPAddr).Port }

// jail is what every process of conversation id's turn gets: its
// workspace, the two proxies (by port on the host, by socket in a network
// namespace), and an environment that names only them.
func (j *jails) jail(id, workspace string) *sandbox.Jail {
	lpPort, egPort := j.lp.Port(), j.egressPort()
	env := sandbox.BaseEnv(workspace)
	// The one credential within reach: the LocalGatewayProxy's for this
	// conversation, with which a script or SDK reaches the model as the
	// conversation does, within its budget.
	env = append(env, "ANTHROPIC_BASE_URL="+j.lp.BaseURLFor(id), "ANTHROPIC_AUTH_TOKEN="+j.lp.Capability(id))
	env = append(env, egress.ProxyEnv(j.egress.URLForAddr(id, net.JoinHostPort("127.0.0.1", strconv.Itoa(egPort))))...)
	return &sandbox.Jail{
		Sandbox:   j.sb,
		Workspace: workspace,
		Env:       env,
		Ports:     []int{lpPort, egPort},
		Sockets: map[int]string{
			lpPort: filepath.Join(j.runDir, "localproxy.sock"),
			egPort: filepath.Join(j.runDir, "egress.sock"),
		},
	}
}

// notices are what every session is told about the sandbox: nothing when
// it works.
func (j *jails) notices() []string {
	switch {
	case j.mode == sandbox.ModeNone:
		return []string{"this worker runs agent commands WITHOUT a sandbox (--sandbox none): they can read other conversations and the worker's secrets"}
	case j.sb.Unavailable() != nil:
		return []string{"this worker refuses to run commands: " + j.sb.Unavailable().Error()}
	}
	return nil
}

// close stops the egress proxy (cutting its tunnels when ctx ends) and
// removes the sockets.
func (j *jails) close(ctx context.Context) {
	if j.egress != nil {
		j.egress.Shutdown(ctx)
	}
	if j.serving != nil {
		<-j.serving
	}
	if j.runDir != "" {
		os.RemoveAll(j.runDir)
	}
	j.sb.Close()
}
