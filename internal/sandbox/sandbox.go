package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/inflight"
)

// DefaultReadOnly is the system the sandboxed commands may read and
// execute: programs, libraries and toolchains under /usr and /opt, and of
// /etc what a userland reads (SystemConfig). Everything else of the host
// is invisible to them. A path missing on the machine is skipped; a path
// with a * is a pattern (filepath.Match) for the entries it matches.
var DefaultReadOnly = append([]string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"}, SystemConfig...)

// SystemConfig are the files and directories of /etc that programs,
// shells, toolchains and their resolvers read: not /etc whole, which holds
// the host's secrets too (shadow, gshadow, SSH host keys, private TLS
// keys), readable wherever the worker runs as root. A program that needs
// another is given it with Options.ReadOnly (talkide's
// --sandbox-read-only).
var SystemConfig = []string{
	// users, names and the network's configuration
	"/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/host.conf", "/etc/resolv.conf",
	"/etc/gai.conf", "/etc/hostname", "/etc/networks", "/etc/protocols", "/etc/services", "/etc/ethertypes",
	"/etc/rpc", "/etc/netconfig",
	// the dynamic loader, time, locale, the system's identity
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/timezone",
	"/etc/locale.alias", "/etc/locale.conf", "/etc/default/locale", "/etc/os-release", "/etc/lsb-release",
	"/etc/debian_version", "/etc/alpine-release", "/etc/redhat-release",
	// certificates: the public ones, never /etc/ssl/private
	"/etc/ssl/certs", "/etc/ssl/openssl.cnf", "/etc/ca-certificates", "/etc/ca-certificates.conf",
	"/etc/pki/tls/certs", "/etc/pki/ca-trust", "/etc/crypto-policies",
	// shells and terminals
	"/etc/alternatives", "/etc/environment", "/etc/profile", "/etc/profile.d", "/etc/bash.bashrc", "/etc/inputrc",
	"/etc/shells", "/etc/terminfo", "/etc/magic", "/etc/magic.mime", "/etc/mime.types", "/etc/manpath.config",
	"/etc/groff", "/etc/vim", "/etc/nanorc",
	// toolchains and their clients
	"/etc/gitconfig", "/etc/npmrc", "/etc/pip.conf", "/etc/wgetrc", "/etc/python3", "/etc/python3.*", "/etc/perl",
	"/etc/java-*", "/etc/maven", "/etc/gradle", "/etc/fonts", "/etc/xml", "/etc/sgml",
	"/etc/ssh/ssh_config", "/etc/ssh/ssh_config.d", "/etc/ssh/ssh_known_hosts",
}

// MinLandlockABI is the Landlock ABI the first layer relies on: 4 brought
// TCP port rules, 5 device ioctls, 6 the scoping of signals and abstract
// unix sockets. With less, ModeAuto refuses to run commands.
const MinLandlockABI = 6

// Options configure a Sandbox; the zero value of each field is its
// default.
type Options struct {
	// Mode is ModeAuto by default.
	Mode Mode
	// Helper is the executable started as the helper: the running one
	// (os.Executable) by default, or a binary that links little else
	// (cmd/talkide-sandbox), which starts faster. Another binary must
	// have been built from the same helper code (CheckHelper); New
	// fails otherwise.
	Helper string
	// ReadOnly replaces DefaultReadOnly when not nil.
	ReadOnly []string
	// Limits are the defaults of commands whose policy leaves a limit
	// zero.
	Limits Limits
	Logger *slog.Logger // nil: don't log
	// Cold starts a helper for each command as it starts, rather than
	// handing it to one started ahead (the benchmark's comparison).
	Cold bool
	// PretendNoLandlock and PretendNoNamespaces make the probe find the
	// layer missing: tests of what happens on machines without them.
	PretendNoLandlock   bool
	PretendNoNamespaces bool
	// PretendNoCgroups keeps a worker running as root from making pids
	// and cpu cgroups: tests of what an unprivileged worker gets.
	PretendNoCgroups bool

	// cpuMount, set by tests, is taken for the cpu hierarchy's mount
	// point, with the worker in its root: a directory that is none
	// shows what a worker without one gets.
	cpuMount string
}

// Sandbox starts confined commands. It is safe for concurrent use.
type Sandbox struct {
	opts   Options
	helper string
	// landlockABI is the kernel's Landlock ABI (0: none); namespaces
	// whether the helper could enter new user, mount, PID and network
	// namespaces. Both are probed once, in New.
	landlockABI int
	namespaces  bool
	// unavailable, when set, is why no command can be started.
	unavailable error
	// cgroups makes a pids and a cpu cgroup per command, each where the
	// worker may; nil where it may make neither.
	cgroups *cgroups
	// readOnly is Options.ReadOnly as found on this machine (Existing).
	readOnly []string
	// markers hands out the commands' call markers; nil where the worker's
	// own RLIMIT_RTTIME leaves no room for them.
	markers *markers

	// The helper started ahead of its command (warm_linux.go): keepWarm
	// makes the one in ready whenever wanted, until closing is closed.
	warmMu      sync.Mutex
	ready       *warmHelper
	warmStarted bool
	warmClosed  bool
	wanted      chan struct{}
	closing     chan struct{}
	warmLoop    sync.WaitGroup
	// reaping counts the helpers reaped behind a Wait that has returned;
	// a command may end while Close waits for the others.
	reaping inflight.Count
}

// New probes what the machine supports and returns the sandbox. In
// ModeAuto and ModeLandlock a machine without Landlock (at
// MinLandlockABI) does not fail New: every command fails instead, with a
// clear error wrapping ErrUnavailable, so that the worker still starts and
// says why its tools refuse.
func New(opts *Options) (*Sandbox, error) {
	o := defaults.Copy(opts)
	defaults.IfZero(&o.Mode, ModeAuto)
	if _, err := ParseMode(string(o.Mode)); err != nil {
		return nil, fmt.Errorf("sandbox: mode %q: %w", o.Mode, err)
	}
	if o.ReadOnly == nil {
		o.ReadOnly = DefaultReadOnly
	}
	defaults.Logger(&o.Logger)
	o.Limits = o.Limits.or(defaultLimits)
	s := &Sandbox{opts: o}
	if o.Mode == ModeNone {
		return s, nil
	}
	exe, err := os.Executable()
	if err != nil && o.Helper == "" {
		return nil, fmt.Errorf("sandbox: the helper executable: %w", err)
	}
	if o.Helper == "" {
		o.Helper = exe
	} else if o.Helper != exe {
		if err := CheckHelper(o.Helper); err != nil {
			return nil, err
		}
	}
	s.helper = o.Helper
	s.opts = o
	if !o.PretendNoLandlock {
		s.landlockABI = landlockABI()
	}
	switch {
	case s.landlockABI == 0:
		s.unavailable = fmt.Errorf("%w: Landlock is not enabled in this kernel (it needs CONFIG_SECURITY_LANDLOCK and landlock in the lsm= boot list); agent commands are refused rather than run bare", ErrUnavailable)
	case s.landlockABI < MinLandlockABI:
		s.unavailable = fmt.Errorf("%w: the kernel's Landlock ABI is %d, the sandbox needs %d (Linux 6.12 or newer); agent commands are refused rather than run bare", ErrUnavailable, s.landlockABI, MinLandlockABI)
	}
	if s.unavailable == nil && o.Mode == ModeAuto && !o.PretendNoNamespaces {
		s.namespaces = s.probeNamespaces()
	}
	s.readOnly = Existing(o.ReadOnly)
	// What a supervisor leaves when it dies comes back to this process,
	// not to init or a container's PID 1, which might not reap it: the
	// call's marker finds it, and the sweep reaps what it killed.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		o.Logger.Warn("sandbox: not a child subreaper: what a killed supervisor leaves goes to init", "err", err)
	}
	if s.unavailable == nil {
		if s.markers, err = newMarkers(); err != nil {
			o.Logger.Warn("sandbox: commands get no call marker: what a command leaves behind when its supervisor is killed may live on", "err", err)
		}
	}
	if s.unavailable == nil && !o.PretendNoCgroups {
		s.cgroups = newCgroups(o)
	}
	return s, nil
}

// newCgroups makes the worker's parent groups, and says once, at start,
// what a command goes without; nil where the worker may make none.
func newCgroups(o Options) *cgroups {
	c := &cgroups{}
	var err error
	// The kernel does not apply RLIMIT_NPROC to root, in a user namespace
	// or not: a worker running as root bounds each command's tree with a
	// pids cgroup instead. (Moving a process into a cgroup waits for an
	// RCU grace period, some milliseconds a command, so a worker that
	// RLIMIT_NPROC protects does without.)
	if os.Getuid() == 0 {
		if c.pids, err = newCgroupParent(pidsController, ""); err != nil {
			o.Logger.Warn("sandbox: a worker running as root without a pids cgroup of its own: the supervisor's count is the only bound on a fork bomb", "err", err)
		}
	}
	// CPU fairness is worth that move for any user who may make the
	// groups; the helper started ahead makes it before its command comes.
	if c.cpu, err = newCgroupParent(cpuController, o.cpuMount); err != nil {
		o.Logger.Info("sandbox: no cpu cgroup per command: commands share the CPU by thread, at nice 5, so a command running many busy threads slows the others' (the pod's CPU limit still bounds them together)", "err", err)
	}
	if c.pids == nil && c.cpu == nil {
		return nil
	}
	return c
}

// Close releases what New made (the helper waiting for a command, the
// worker's cgroup), once the commands that have ended are cleaned up
// after. Commands still running keep theirs until they end.
func (s *Sandbox) Close() {
	s.stopWarm()
	// Commands whose Wait has returned may still be reaping their helper
	// and removing their directory and cgroup: a worker (or a one-shot
	// CLI) that exits next must not leave those behind.
	s.reaping.Wait()
	if s.cgroups != nil {
		s.cgroups.close()
	}
}

// Mode returns the configured mode.
func (s *Sandbox) Mode() Mode { return s.opts.Mode }

// Layers returns the layers every command gets, for the start-up log.
// None when the mode is none or no command can run.
func (s *Sandbox) Layers() []string {
	if s.opts.Mode == ModeNone || s.unavailable != nil {
		return nil
	}
	l := []string{LayerEnv, LayerLandlock, LayerSeccomp}
	if s.namespaces {
		l = append(l, LayerNamespaces)
	}
	return l
}

// Helper returns the executable started as the helper; empty in mode
// none.
func (s *Sandbox) Helper() string { return s.helper }

// ReadOnly returns the paths every command may read and execute beside
// its own, as found on this machine.
func (s *Sandbox) ReadOnly() []string { return slices.Clone(s.readOnly) }

// Unavailable returns why no command can run, or nil.
func (s *Sandbox) Unavailable() error { return s.unavailable }

// Namespaces reports whether commands get the namespace layer.
func (s *Sandbox) Namespaces() bool { return s.namespaces }

// CPUGroups reports whether each command gets a cpu cgroup of its own,
// of the same weight as every other command's.
func (s *Sandbox) CPUGroups() bool { return s.cgroups != nil && s.cgroups.cpu != nil }

// Cmd is a sandboxed command. Its exec.Cmd runs the helper (the command
// itself in mode none): set Stdin, Stdout and Stderr, or take its pipes
// through Cmd's own methods, before Start; after Start, the exec.Cmd may
// be another one, that of a helper started ahead (Warm). Wait may return
// before the helper is reaped: its ProcessState is Exited's to give. Use
// it once.
type Cmd struct {
	*exec.Cmd

	s      *Sandbox
	policy Policy
	// Files of the helper, closed in the worker once it has started.
	childFiles []*os.File
	status     *os.File  // read end: why setting up failed; nil when the helper reports on stderr
	result     *os.File  // read end: the supervisor's outcome
	callDir    string    // the per-command directory (the temporary directory, the namespace's root)
	cgroups    cmdGroups // the command's cgroups, removed after it
	marker     uint64    // the call's marker; 0 for none
	cfg        helperConfig
	goAhead    *os.File // closed once the worker has moved the helper into the cgroup

	// warm says the command was handed to a helper started ahead of it;
	// execPipes that exec.Cmd made its pipes, which only a helper it
	// starts itself can have.
	warm      bool
	execPipes bool
	// refill starts the helper that replaces the one c took, once; its
	// timer calls it should c run long.
	refill      func()
	refillTimer *time.Timer

	stopOnce    sync.Once
	releaseOnce sync.Once
	reportOnce  sync.Once
	report      *Outcome      // the supervisor's report, once read; nil if none came
	exited      chan struct{} // closed by Release, which follows the helper's reaping
	waited      chan struct{}
	released    chan struct{} // closed by Release
	outcome     Outcome
	waitErr     error
}

// Outcome is how a command ended.
type Outcome struct {
	Ending Ending
	// ExitCode is the command's exit status, or -1 when a signal ended
	// it (Signal says which).
	ExitCode int
	Signal   syscall.Signal
}

// Command returns the command p describes, ready to start. Policy.Env
// gets TMPDIR, a directory of the command's own that is removed after it.
// In mode none the command runs bare, as the caller asked.
func (s *Sandbox) Command(p Policy) (*Cmd, error) {
	return s.command(p, true)
}

// ExecCommand is Command for a caller that starts and waits for the
// exec.Cmd itself (an MCP client's transport): the helper then reports a
// failure to set up on the command's stderr, and the caller calls Release
// once the process has been waited for. When ctx ends, the supervisor is
// asked to end the tree (and killed after a grace period), as
// exec.CommandContext does it: safe while the caller is still starting it.
func (s *Sandbox) ExecCommand(ctx context.Context, p Policy) (*Cmd, error) {
	c, err := s.command(p, false)
	if err != nil {
		return nil, err
	}
	bare := c.Cmd
	cmd := exec.CommandContext(ctx, bare.Path, bare.Args[1:]...)
	cmd.Env, cmd.Dir, cmd.ExtraFiles, cmd.SysProcAttr = bare.Env, bare.Dir, bare.ExtraFiles, bare.SysProcAttr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = stopGrace
	c.Cmd = cmd
	return c, nil
}

func (s *Sandbox) command(p Policy, statusPipe bool) (_ *Cmd, err error) {
	if p.Path == "" {
		return nil, errors.New("sandbox: no program")
	}
	if s.unavailable != nil {
		return nil, s.unavailable
	}
	if p.Workspace == "" || !filepath.IsAbs(p.Workspace) {
		return nil, errors.New("sandbox: the workspace must be an absolute path")
	}
	defaults.IfZero(&p.Dir, p.Workspace)
	p.Env = slices.Clone(p.Env)
	if p.Env == nil {
		p.Env = []string{}
	}
	p.Limits = p.Limits.or(s.opts.Limits)
	c := &Cmd{s: s, policy: p, waited: make(chan struct{}), exited: make(chan struct{}), released: make(chan struct{})}
	if s.opts.Mode == ModeNone {
		c.Cmd = exec.Command(p.Path, p.Args...)
		c.Cmd.Env, c.Cmd.Dir = p.Env, p.Dir
		c.Cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		return c, nil
	}
	if s.namespaces {
		for _, port := range p.Ports {
			if p.Sockets[port] == "" {
				return nil, fmt.Errorf("sandbox: port %d has no unix socket to forward to inside the network namespace", port)
			}
		}
	}
	defer func() {
		if err != nil {
			c.Release()
		}
	}()
	if c.callDir, err = os.MkdirTemp("", "talkide-sandbox-"); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	tmp := filepath.Join(c.callDir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	c.policy.Writable = append(slices.Clone(p.Writable), tmp)
	c.policy.Env = setEnv(c.policy.Env, "TMPDIR", tmp)
	c.cfg = helperConfig{
		Stage:      1,
		Policy:     c.policy,
		ReadOnly:   s.readOnly,
		Namespaces: s.namespaces,
		Helper:     s.helper,
		StatusFD:   fdStatus,
		Marker:     s.markers.next(),
	}
	c.marker = c.cfg.Marker
	if !statusPipe {
		c.cfg.StatusFD = 2
	}
	if s.namespaces {
		c.cfg.RootDir = filepath.Join(c.callDir, "root")
		if err := os.Mkdir(c.cfg.RootDir, 0o700); err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
	}
	c.Cmd = s.helperCmd()
	if statusPipe {
		return c, nil // Start prepares the rest, once it knows which helper runs it
	}
	// The caller starts the helper itself: it has to be ready now, and the
	// helper moves itself into its cgroups.
	var groups cmdGroups
	if s.cgroups != nil {
		if groups, err = s.cgroups.create(p.Limits); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
	if err := c.prepare(groups, true, false); err != nil {
		return nil, err
	}
	return c, nil
}

// prepare makes the helper's files (fds 3 to 6: the configuration, the
// status and result pipes, the go-ahead) and gives them to the exec.Cmd.
// groups are the command's cgroups, removed after it; enter says the
// supervisor is not in them yet (a helper started ahead is): it enters
// them itself or, byWorker, the worker moves it in and gives it the
// go-ahead.
func (c *Cmd) prepare(groups cmdGroups, enter, byWorker bool) error {
	c.cgroups = groups
	cfg := c.cfg
	if enter {
		cfg.Cgroups = groups.dirs()
	}
	cfg.CgroupByWorker = byWorker && len(cfg.Cgroups) > 0
	conf, err := configFile(cfg)
	if err != nil {
		return err
	}
	c.childFiles = append(c.childFiles, conf)
	var statusW *os.File
	if cfg.StatusFD == fdStatus {
		if c.status, statusW, err = os.Pipe(); err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
	} else if statusW, err = os.Open(os.DevNull); err != nil { // fd 4 unused: the helper reports on stderr
		return fmt.Errorf("sandbox: %w", err)
	}
	c.childFiles = append(c.childFiles, statusW)
	resultR, resultW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	c.result = resultR
	c.childFiles = append(c.childFiles, resultW)
	extra := []*os.File{conf, statusW, resultW} // fds 3, 4, 5
	if cfg.CgroupByWorker {
		goR, goW, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
		c.goAhead = goW
		c.childFiles = append(c.childFiles, goR)
		extra = append(extra, goR) // fd 6
	}
	c.Cmd.ExtraFiles = extra
	return nil
}

// unprepare closes what prepare made, for another try.
func (c *Cmd) unprepare() {
	for _, f := range []*os.File{c.status, c.result, c.goAhead} {
		if f != nil {
			f.Close()
		}
	}
	for _, f := range c.childFiles {
		f.Close()
	}
	c.status, c.result, c.goAhead, c.childFiles, c.cgroups = nil, nil, nil, nil, cmdGroups{}
	c.Cmd.ExtraFiles = nil
}

// helperCmd is the helper's process, with args after HelperArg.
func (s *Sandbox) helperCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(s.helper, append([]string{HelperArg}, args...)...)
	cmd.Env = []string{} // the helper needs nothing of the worker's
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if s.namespaces {
		setNamespaces(cmd.SysProcAttr)
	}
	// Once the supervisor is gone, its pipes are closed by the tree's
	// end; should a process of the tree outlive it (the supervisor itself
	// killed), that process's copy must not keep Wait, and so Release and
	// the cgroup's cleanup, from ever coming.
	cmd.WaitDelay = stopGrace
	return cmd
}

// stopGrace is how long the supervisor has to end the tree after Stop
// before it is killed itself.
const stopGrace = 3 * time.Second

// configFile returns an unlinked file holding cfg, read from its start by
// the helper: nothing else can open it, and no goroutine has to feed it.
func configFile(cfg helperConfig) (*os.File, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	fd, err := unixMemfd("talkide-sandbox-config")
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	f := os.NewFile(uintptr(fd), "config")
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return f, nil
}

// setEnv returns env with name set to value, replacing earlier settings.
func setEnv(env []string, name, value string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return append(out, name+"="+value)
}

// Start starts the command and, with a status pipe (Command), returns
// once it runs confined, or with the error that kept the sandbox from
// confining it (wrapping ErrUnavailable): the command never runs bare.
func (c *Cmd) Start() error {
	err := c.start()
	for _, f := range c.childFiles {
		f.Close()
	}
	c.childFiles = nil
	if err != nil {
		c.Release()
		if c.s.opts.Mode == ModeNone || errors.Is(err, ErrUnavailable) {
			return err
		}
		return fmt.Errorf("%w: the helper could not start: %v", ErrUnavailable, err)
	}
	if c.goAhead != nil {
		err := c.cgroups.enter(c.Cmd.Process.Pid)
		c.goAhead.Close() // on success the go-ahead, on failure the helper's cue to stop
		c.goAhead = nil
		if err != nil {
			c.Cmd.Process.Kill()
			c.Wait()
			return fmt.Errorf("%w: cgroup: %v", ErrUnavailable, err)
		}
	}
	if c.status == nil {
		return nil
	}
	// The status pipe closes when the command is executed (its copies
	// are close-on-exec); before that, a failing stage writes why.
	msg, _ := io.ReadAll(io.LimitReader(c.status, 64<<10))
	c.status.Close()
	if len(msg) > 0 {
		c.Wait()
		return fmt.Errorf("%w: %s", ErrUnavailable, strings.TrimSpace(string(msg)))
	}
	return nil
}

// start hands the command to the helper waiting for one, or starts a
// helper for it.
func (c *Cmd) start() error {
	if c.s.opts.Mode == ModeNone {
		return c.Cmd.Start()
	}
	if h := c.takeWarm(); h != nil {
		// A helper started ahead sits in its cgroups already: the move,
		// an RCU grace period of milliseconds, was made while it waited.
		err := c.prepare(h.groups, false, false)
		l, d := c.policy.Limits, c.s.opts.Limits
		if err == nil && c.s.cgroups != nil && (l.MaxProcs != d.MaxProcs || l.CPUs != d.CPUs) {
			err = c.s.cgroups.fit(h.groups, l)
		}
		if err == nil {
			err = c.hand(h)
		} else {
			h.discard()
			c.s.wantWarm()
		}
		if err == nil {
			return nil
		}
		c.unprepare() // h is gone, and its cgroups with it: a helper of its own
	}
	var groups cmdGroups
	if c.s.cgroups != nil {
		var err error
		if groups, err = c.s.cgroups.create(c.policy.Limits); err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
	// The worker moves the helper into the cgroups while it initialises;
	// the helper waits for that (its go-ahead) before it starts the
	// command.
	if err := c.prepare(groups, true, true); err != nil {
		if c.s.cgroups != nil {
			c.s.cgroups.remove(groups)
		}
		return err
	}
	return c.Cmd.Start()
}

// takeWarm returns the helper waiting for a command when this one can
// be handed to it.
func (c *Cmd) takeWarm() *warmHelper {
	if !c.warmable() {
		return nil
	}
	return c.s.takeWarm()
}

// Warm reports whether the command was handed to a helper started ahead
// of it rather than one started for it.
func (c *Cmd) Warm() bool { return c.warm }

// StdinPipe, StdoutPipe and StderrPipe are exec.Cmd's: the command then
// starts a helper of its own, since exec closes its ends of the pipes only
// in its own Start.
func (c *Cmd) StdinPipe() (io.WriteCloser, error) {
	c.execPipes = true
	return c.Cmd.StdinPipe()
}

// StdoutPipe is exec.Cmd's (see StdinPipe).
func (c *Cmd) StdoutPipe() (io.ReadCloser, error) {
	c.execPipes = true
	return c.Cmd.StdoutPipe()
}

// StderrPipe is exec.Cmd's (see StdinPipe).
func (c *Cmd) StderrPipe() (io.ReadCloser, error) {
	c.execPipes = true
	return c.Cmd.StderrPipe()
}

// Pid is the supervisor's process id (the command's, in mode none).
func (c *Cmd) Pid() int { return c.Cmd.Process.Pid }

// Wait waits for the command's tree to be gone and returns how it ended.
// The error is nil when the command exited 0, an *ExitError otherwise.
func (c *Cmd) Wait() (Outcome, error) {
	select {
	case <-c.waited:
		return c.outcome, c.waitErr
	default:
	}
	defer close(c.waited)
	if c.s.opts.Mode != ModeNone && c.stdioFiles() {
		// The supervisor reports how the command ended once its tree is
		// gone, and only then exits, which takes a Go process a
		// millisecond or two (each of its threads is woken to die); the
		// caller need not wait for that. The helper is reaped, and the
		// command's directory and cgroup removed, behind it. (Not when
		// exec.Cmd copies the command's output: its copy ends only in
		// its Wait.)
		if o, ok := c.reported(); ok {
			c.outcome, c.waitErr = o, exitError(o)
			c.s.reaping.Add(1) // Close waits for it
			go func() {
				defer c.s.reaping.Done()
				c.Cmd.Wait()
				c.Release()
			}()
			return c.outcome, c.waitErr
		}
	}
	err := c.Cmd.Wait()
	defer c.Release()
	c.outcome = c.Outcome(err)
	c.waitErr = exitError(c.outcome)
	return c.outcome, c.waitErr
}

// Exited waits until the helper itself has exited and been reaped and
// the command's directory and cgroup removed (Wait may return before),
// and returns the helper's state, which counts the command's resources
// too; nil when it never started. Call it after Wait (or Release): the
// exec.Cmd's ProcessState is not to be read before it returns.
func (c *Cmd) Exited() *os.ProcessState {
	<-c.exited
	return c.Cmd.ProcessState
}

// reported reads the supervisor's report, once: the read ends when the
// supervisor has written it, or has died without a word (ok false).
func (c *Cmd) reported() (Outcome, bool) {
	c.reportOnce.Do(func() {
		var r helperResult
		b, _ := io.ReadAll(io.LimitReader(c.result, 4096))
		if json.Unmarshal(b, &r) == nil {
			c.report = &Outcome{Ending: r.Ending, ExitCode: r.ExitCode, Signal: syscall.Signal(r.Signal)}
		}
	})
	if c.report == nil {
		return Outcome{}, false
	}
	return *c.report, true
}

// Outcome reads how the command ended, given what waiting for the
// helper returned; for a caller that waited through the exec.Cmd.
func (c *Cmd) Outcome(waitErr error) Outcome {
	// A caller that started the exec.Cmd itself did not close the
	// helper's ends of the pipes: the result is read to its end only once
	// they are.
	for _, f := range c.childFiles {
		f.Close()
	}
	c.childFiles = nil
	if c.s.opts.Mode == ModeNone {
		// What the command left in its session does not outlive it.
		syscall.Kill(-c.Cmd.Process.Pid, syscall.SIGKILL)
		return outcomeOf(waitErr)
	}
	if o, ok := c.reported(); ok {
		return o
	}
	// The supervisor died without a word (it was killed): its session
	// goes with it, and so does every process of the tree, which no
	// subreaper watches any more: they are found by the call's marker.
	syscall.Kill(-c.Cmd.Process.Pid, syscall.SIGKILL)
	if n := killMarked(c.marker); n > 0 {
		c.s.opts.Logger.Warn("sandbox: the supervisor was gone; killed the processes its command left", "processes", n)
	}
	o := Outcome{Ending: EndStopped, ExitCode: -1, Signal: syscall.SIGKILL}
	if c.cgroups.pids != "" && hitMax(c.cgroups.pids) {
		// A tree that filled its cgroup leaves the supervisor, which
		// shares it, no room for a thread of its own, and the Go runtime
		// ends a process that cannot make one: the tree ran out of
		// processes, whoever noticed first.
		o.Ending = EndProcs
	}
	if ee, ok := errors.AsType[*exec.ExitError](waitErr); ok && !ee.Exited() {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			o.Signal = ws.Signal()
		}
	}
	return o
}

// Stop asks the supervisor to end the command's tree (SIGTERM, then
// SIGKILL to all of it); if the supervisor itself has not gone within a
// grace period, it is killed. Stop does not wait; call Wait.
func (c *Cmd) Stop() {
	c.stopOnce.Do(func() {
		if c.Cmd == nil || c.Cmd.Process == nil {
			return
		}
		c.Cmd.Process.Signal(syscall.SIGTERM)
		go func() {
			t := time.NewTimer(stopGrace)
			defer t.Stop()
			select {
			case <-c.waited:
			case <-c.released:
			case <-t.C:
				syscall.Kill(-c.Cmd.Process.Pid, syscall.SIGKILL)
				c.Cmd.Process.Kill()
			}
		}()
	})
}

// Run starts the command, waits for it, and stops it when ctx ends.
func (c *Cmd) Run(ctx context.Context) (Outcome, error) {
	if err := c.Start(); err != nil {
		return Outcome{}, err
	}
	stop := context.AfterFunc(ctx, c.Stop)
	defer stop()
	return c.Wait()
}

// Release removes what the command had of its own (its directory and
// cgroup, killing what is left in the cgroup). Wait calls it; a caller
// that waited through the exec.Cmd calls it once the process has been
// waited for.
func (c *Cmd) Release() {
	c.releaseOnce.Do(func() {
		defer close(c.exited)
		close(c.released)
		if c.refill != nil {
			c.refillTimer.Stop()
			c.refill()
		}
		for _, f := range c.childFiles {
			f.Close()
		}
		if c.goAhead != nil {
			c.goAhead.Close()
		}
		if c.status != nil {
			c.status.Close()
		}
		if c.result != nil {
			c.result.Close()
		}
		if c.callDir != "" {
			os.RemoveAll(c.callDir)
		}
		if c.s.cgroups != nil {
			c.s.cgroups.remove(c.cgroups)
		}
	})
}

// ExitError is a command that did not exit 0.
type ExitError struct{ Outcome }

func (e *ExitError) Error() string {
	switch {
	case e.Ending == EndTimeout:
		return "killed: the time limit passed"
	case e.Ending == EndProcs:
		return "killed: too many processes"
	case e.Ending == EndMemory:
		return "killed: too much memory"
	case e.Ending == EndStopped:
		return "stopped"
	case e.Signal != 0:
		return "terminated by signal " + e.Signal.String()
	}
	return fmt.Sprintf("exit status %d", e.ExitCode)
}

func exitError(o Outcome) error {
	if o.Ending == EndExited && o.ExitCode == 0 && o.Signal == 0 {
		return nil
	}
	return &ExitError{o}
}

func outcomeOf(err error) Outcome {
	if err == nil {
		return Outcome{Ending: EndExited}
	}
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return Outcome{Ending: EndExited, ExitCode: -1, Signal: ws.Signal()}
		}
		return Outcome{Ending: EndExited, ExitCode: ee.ExitCode()}
	}
	return Outcome{Ending: EndStopped, ExitCode: -1}
}

// Existing returns the paths that exist, cleaned, without duplicates, a
// pattern replaced by the entries it matches: what a list like
// DefaultReadOnly grants on this machine.
func Existing(paths []string) []string {
	var out []string
	add := func(p string) {
		p = filepath.Clean(p)
		if _, err := os.Lstat(p); err == nil && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for _, p := range paths {
		if !strings.Contains(p, "*") {
			add(p)
			continue
		}
		matches, _ := filepath.Glob(p)
		for _, m := range matches {
			add(m)
		}
	}
	return out
}

// probeNamespaces runs the helper once in new namespaces.
func (s *Sandbox) probeNamespaces() bool {
	cmd := exec.Command(s.helper, HelperArg, "probe")
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	setNamespaces(cmd.SysProcAttr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.opts.Logger.Info("sandbox: no user namespaces here; commands get the first layer only", "err", err, "output", firstLine(out))
		return false
	}
	return true
}

func firstLine(b []byte) string {
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line)
}
