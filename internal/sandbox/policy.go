// Package sandbox runs the processes the agent starts (Bash commands, stdio
// MCP servers, the Claude Code CLI, local builds) so that they reach their
// own conversation's workspace and nothing else.
//
// The talkide binary is its own helper: a sandboxed command is the binary
// re-executed with HelperArg, which confines itself and then executes the
// command, so that no code path starts an agent command bare. Two layers:
//
//   - always: a cleared environment, its own session, rlimits, a
//     supervisor that kills the whole process tree when the command ends
//     or runs out of time, processes or memory, all capabilities dropped,
//     Landlock (a read-only allow-list of the system, the workspace and a
//     per-call temporary directory writable, TCP connect only to the
//     worker's proxies, no signals or abstract sockets out of the domain)
//     and a seccomp filter closing what Landlock cannot (UDP, raw and
//     unix sockets, io_uring, ptrace, namespaces, mounts);
//   - where user namespaces exist: a mount namespace whose root holds
//     only the allow-list, the workspace and the temporary directory, a
//     PID namespace with its own /proc, and an empty network namespace
//     whose only ways out are the worker's proxies, forwarded by the
//     supervisor over unix sockets.
//
// docs/sandbox.md says what each layer stops and what it does not.
package sandbox

import (
	"errors"
	"time"

	"github.com/talkide/platform/internal/defaults"
)

// HelperArg is the first argument of the binary re-executed as the
// helper. A program that sandboxes commands calls RunHelper first thing in
// main (and tests in TestMain).
const HelperArg = "__talkide_sandbox"

// Mode is how strongly commands are sandboxed.
type Mode string

// Modes.
const (
	// ModeAuto applies every layer the machine supports and refuses to run
	// commands when not even the first layer can be applied.
	ModeAuto Mode = "auto"
	// ModeLandlock applies the first layer only, even where namespaces
	// exist (what a restricted Kubernetes pod allows).
	ModeLandlock Mode = "landlock"
	// ModeNone runs commands without a sandbox: an explicit choice that is
	// announced wherever it applies.
	ModeNone Mode = "none"
)

// ParseMode reads a mode by name.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeAuto, ModeLandlock, ModeNone:
		return m, nil
	}
	return "", errors.New("want auto, landlock or none")
}

// Layer names, as Layers reports them.
const (
	LayerEnv        = "env"        // cleared environment, session, rlimits, supervisor, capabilities
	LayerLandlock   = "landlock"   // filesystem, TCP, signal and socket scoping
	LayerSeccomp    = "seccomp"    // the syscall filter
	LayerNamespaces = "namespaces" // user, mount, PID, network and IPC namespaces
)

// ErrUnavailable is wrapped by the error of every command a sandbox
// refuses to start because it cannot confine it.
var ErrUnavailable = errors.New("the sandbox cannot be applied on this machine")

// Limits bound one command's process tree. A zero field means its
// default.
type Limits struct {
	// MaxProcs is how many processes the tree may hold at once; beyond
	// it the supervisor kills the whole tree. Default 256.
	MaxProcs int `json:"max_procs,omitempty"`
	// MaxMemory bounds each process's writable memory (RLIMIT_DATA) and
	// the resident memory of the tree together, which the supervisor
	// watches. Default 2 GiB.
	MaxMemory int64 `json:"max_memory,omitempty"`
	// MaxFileSize bounds each file a process writes (RLIMIT_FSIZE).
	// Default 1 GiB.
	MaxFileSize int64 `json:"max_file_size,omitempty"`
	// MaxOpenFiles bounds each process's descriptors (RLIMIT_NOFILE).
	// Default 4096.
	MaxOpenFiles int `json:"max_open_files,omitempty"`
	// MaxCPU bounds each process's CPU time (RLIMIT_CPU), a backstop to
	// the wall-clock timeout. Default 20 minutes.
	MaxCPU time.Duration `json:"max_cpu,omitempty"`
	// CPUs is the tree's ceiling in CPUs (1.5: one and a half), where the
	// command gets a cpu cgroup of its own; none by default. Every
	// command has the same weight there whatever its ceiling, so that a
	// busy one cannot crowd out another; a ceiling keeps a command from
	// taking idle CPUs too, which the default does not (a build alone on
	// the worker should have them all, and the pod's CPU limit bounds the
	// commands together). Without a cpu cgroup it bounds nothing.
	CPUs float64 `json:"cpus,omitempty"`
}

// Default limits.
const (
	DefaultMaxProcs     = 256
	DefaultMaxMemory    = 2 << 30
	DefaultMaxFileSize  = 1 << 30
	DefaultMaxOpenFiles = 4096
	DefaultMaxCPU       = 20 * time.Minute
)

// defaultLimits are the limits of a command whose policy and sandbox
// leave them zero.
var defaultLimits = Limits{
	MaxProcs: DefaultMaxProcs, MaxMemory: DefaultMaxMemory, MaxFileSize: DefaultMaxFileSize,
	MaxOpenFiles: DefaultMaxOpenFiles, MaxCPU: DefaultMaxCPU,
}

// or returns l with each zero field taken from d.
func (l Limits) or(d Limits) Limits {
	defaults.IfNotPositive(&l.MaxProcs, d.MaxProcs)
	defaults.IfNotPositive(&l.MaxMemory, d.MaxMemory)
	defaults.IfNotPositive(&l.MaxFileSize, d.MaxFileSize)
	defaults.IfNotPositive(&l.MaxOpenFiles, d.MaxOpenFiles)
	defaults.IfNotPositive(&l.MaxCPU, d.MaxCPU)
	defaults.IfNotPositive(&l.CPUs, d.CPUs)
	return l
}

// Policy is one command and what it may reach.
type Policy struct {
	// Path is the program (absolute, or looked up in Env's PATH by the
	// helper); Args are its arguments, without argv[0].
	Path string
	Args []string
	// Env is the command's complete environment; nothing of the worker's
	// is inherited.
	Env []string
	// Dir is the working directory; default Workspace.
	Dir string
	// Workspace is the conversation's working tree: read, write, execute.
	Workspace string
	// Writable are more directories the command may change, such as its
	// temporary directory or a CLI's own state.
	Writable []string
	// ReadOnly are more paths the command may read and execute, beyond
	// the sandbox's allow-list: a toolchain, a CLI's installation.
	ReadOnly []string
	// Ports are the loopback TCP ports the command may connect to: the
	// worker's proxies. With namespaces, each is forwarded from the same
	// port inside the network namespace to the unix socket in Sockets.
	Ports []int
	// Sockets maps each of Ports to the unix socket of the proxy behind
	// it; required for every port when namespaces apply.
	Sockets map[int]string
	// Timeout is the wall-clock limit after which the whole tree is
	// killed; zero means none (the caller's context still ends it).
	Timeout time.Duration
	Limits  Limits
}

// Ending says why the supervisor ended a command's tree.
type Ending string

// Endings.
const (
	EndExited  Ending = "exited"  // the command ended; what it left running was killed
	EndTimeout Ending = "timeout" // Policy.Timeout passed
	EndProcs   Ending = "procs"   // the tree held more than Limits.MaxProcs processes
	EndMemory  Ending = "memory"  // the tree's resident memory passed Limits.MaxMemory
	EndStopped Ending = "stopped" // the worker asked (Cmd.Stop, the caller's context)
)

// BaseEnv is the environment an agent command starts from: the system's
// PATH, its workspace as HOME, UTF-8 and a terminal that takes no escape
// codes; nothing of the worker's. A worker adds its proxies' variables.
func BaseEnv(home string) []string {
	return []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "LANG=C.UTF-8", "TERM=dumb"}
}
