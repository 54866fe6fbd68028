package sandbox

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// startConfined starts the command on an OS thread of its own that first
// gives up every capability and sets no_new_privs, Landlock and seccomp:
// all of them are the calling thread's, and a child forked from it
// inherits them, so the command starts confined without a second helper
// process. The thread is never given back to the Go scheduler: it stays
// parked until the supervisor exits, which also keeps the command's
// parent-death signal (which fires when the forking thread ends) from
// firing early. rlimits, being the process's, are set by the caller.
func startConfined(cfg helperConfig) (int, error) {
	type started struct {
		pid int
		err error
	}
	ch := make(chan started, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is spent
		pid, err := confineAndFork(cfg)
		// No signal is handled on this thread from now on: a confined
		// thread may not be able to do all that handling one takes
		// (Landlock scopes the signals it sends).
		var all unix.Sigset_t
		for i := range all.Val {
			all.Val[i] = ^uint64(0)
		}
		unix.PthreadSigmask(unix.SIG_BLOCK, &all, nil)
		ch <- started{pid, err}
		select {} // parked for the life of the supervisor
	}()
	r := <-ch
	return r.pid, r.err
}

func confineAndFork(cfg helperConfig) (int, error) {
	p := cfg.Policy
	if err := dropCapabilities(); err != nil {
		return 0, fmt.Errorf("capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("no_new_privs: %w", err)
	}
	if err := landlock(cfg); err != nil {
		return 0, err
	}
	if err := seccomp(!cfg.InNamespace); err != nil {
		return 0, err
	}
	// The command runs a little behind the worker and the supervisors:
	// the nice value is this thread's, and the command inherits it. A
	// busy command then cannot take the CPU from the worker's streams and
	// leases, nor from the supervisor that has to end it; on an idle
	// machine it changes nothing. (RLIMIT_NICE 0 keeps it from going back.)
	// In a cpu cgroup of its own the command weighs as one group however
	// many threads it runs, and the nice value then only keeps it behind
	// its own supervisor, which shares the group.
	unix.Setpriority(unix.PRIO_PROCESS, 0, commandNice)
	// Nothing but stdin, stdout and stderr reaches the command: not the
	// supervisor's pipes, and not a descriptor the worker inherited from
	// whoever started it and never knew of (talkide dev 9<file). Every
	// descriptor above 2 is closed on exec, in whatever way the helper
	// was started.
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return 0, fmt.Errorf("close_range: %w", err)
	}
	// Confined already: what the thread cannot see is not found.
	path, err := lookPath(p.Path, p.Env)
	if err != nil {
		return 0, err
	}
	if fi, err := os.Stat(p.Dir); err != nil || !fi.IsDir() {
		return 0, fmt.Errorf("working directory %s: not a directory it can reach", p.Dir)
	}
	pid, err := syscall.ForkExec(path, append([]string{p.Path}, p.Args...), &syscall.ProcAttr{
		Dir:   p.Dir,
		Env:   p.Env,
		Files: []uintptr{0, 1, 2},
		// Its own process group, which the tree shares unless it leaves it:
		// one kill reaches all of them, however many a fork bomb made.
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return 0, fmt.Errorf("cannot execute %s: %w", p.Path, err)
	}
	return pid, nil
}

// lookPath finds file as the command's shell would: in env's PATH when it
// has no slash. It runs confined, so what it cannot see is not found.
func lookPath(file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		f := filepath.Join(dir, file)
		if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return f, nil
		}
	}
	return "", &exec.Error{Name: file, Err: exec.ErrNotFound}
}

// commandNice is the nice value commands start with.
const commandNice = 5

// setRlimits sets the limits every process of the command inherits, and
// the call's marker when there is one. RLIMIT_DATA, not RLIMIT_AS: the
// address space a JavaScript engine or a JVM reserves without touching is
// not memory, and an AS limit would stop them before they start.
// RLIMIT_RTPRIO and RLIMIT_NICE 0: no real-time scheduling (which would
// starve everything else of the CPU) and no way back from commandNice.
func setRlimits(l Limits, marker uint64) error {
	set := func(res int, v uint64) error {
		var cur unix.Rlimit
		if err := unix.Getrlimit(res, &cur); err != nil {
			return err
		}
		v = min(v, cur.Max)
		return unix.Setrlimit(res, &unix.Rlimit{Cur: v, Max: v})
	}
	// RLIMIT_NPROC counts every task of the real user: the worker's and
	// the other commands' too, so it is only a backstop, and the kernel
	// does not apply it to root at all. The pids cgroup (when the worker
	// may make one) bounds the tree exactly; the supervisor's count and
	// its process group bound it everywhere.
	const nproc = 8192
	for _, r := range []struct {
		res int
		v   uint64
	}{
		{unix.RLIMIT_DATA, uint64(l.MaxMemory)},
		{unix.RLIMIT_FSIZE, uint64(l.MaxFileSize)},
		{unix.RLIMIT_NOFILE, uint64(l.MaxOpenFiles)},
		{unix.RLIMIT_CPU, uint64(l.MaxCPU.Seconds())},
		{unix.RLIMIT_CORE, 0},
		{unix.RLIMIT_NPROC, nproc},
		{unix.RLIMIT_RTPRIO, 0},
		{unix.RLIMIT_NICE, 0},
	} {
		if err := set(r.res, r.v); err != nil {
			return err
		}
	}
	if marker != 0 {
		// Exactly, or not at all: the worker finds the tree by this
		// number (the worker checked that its hard limit allows it).
		if err := unix.Setrlimit(unix.RLIMIT_RTTIME, &unix.Rlimit{Cur: marker, Max: marker}); err != nil {
			return fmt.Errorf("the call marker: %w", err)
		}
	}
	return nil
}

// Securebits (linux/securebits.h).
const (
	secbitNoroot             = 1 << 0
	secbitNorootLocked       = 1 << 1
	secbitNoSetuidFixup      = 1 << 2
	secbitNoSetuidFixupLock  = 1 << 3
	secbitKeepCapsLocked     = 1 << 5
	secbitNoCapAmbientRaise  = 1 << 6
	secbitNoCapAmbientLocked = 1 << 7
)

// dropCapabilities gives up every capability for good: a command that
// runs as root (in a user namespace, or a worker started as root) has no
// more power than any other user, and executing a program does not give
// any back.
func dropCapabilities() error {
	bits := secbitNoroot | secbitNorootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLock |
		secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientLocked
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0); err != nil && !errors.Is(err, unix.EPERM) {
		return err // EPERM: no CAP_SETPCAP, so there are no capabilities to lose
	}
	unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EINVAL) {
			return err
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if _, _, errno := unix.Syscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); errno != 0 {
		return errno
	}
	return nil
}

// CloseOnExecInherited marks every descriptor above stderr close-on-exec.
// The Go runtime opens its own files so, but a descriptor the process
// inherited from whoever started it (a shell's 9<file) stays open across
// every exec it makes: call it first in main, once the process has read
// what it was handed. The helper closes them for each command too.
func CloseOnExecInherited() error {
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("close-on-exec: %w", err)
	}
	return nil
}
