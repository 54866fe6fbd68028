package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// confine is stage 2: on its one thread it gives up every capability,
// sets its rlimits, no_new_privs, Landlock and seccomp, and executes the
// command, which inherits all of it. It returns only through fail.
func confine(cfg helperConfig, status *os.File, fail func(string, ...any)) {
	// The status pipe must close when the command is executed, so that
	// the worker knows it runs. (When it is stderr, the supervisor passed
	// a copy as fd 4.)
	unix.CloseOnExec(int(status.Fd()))
	p := cfg.Policy
	if err := setRlimits(p.Limits); err != nil {
		fail("sandbox: rlimits: %v", err)
	}
	if err := dropCapabilities(); err != nil {
		fail("sandbox: capabilities: %v", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fail("sandbox: no_new_privs: %v", err)
	}
	if err := landlock(cfg); err != nil {
		fail("sandbox: %v", err)
	}
	if err := seccomp(); err != nil {
		fail("sandbox: %v", err)
	}
	if err := os.Chdir(p.Dir); err != nil {
		fail("sandbox: working directory %s: %v", p.Dir, err)
	}
	path, err := lookPath(p.Path, p.Env)
	if err != nil {
		fail("sandbox: %v", err)
	}
	argv := append([]string{p.Path}, p.Args...)
	err = syscall.Exec(path, argv, p.Env)
	fail("sandbox: cannot execute %s: %v", p.Path, err)
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

// setRlimits sets the limits every process of the command inherits.
// RLIMIT_DATA, not RLIMIT_AS: the address space a JavaScript engine or a
// JVM reserves without touching is not memory, and an AS limit would stop
// them before they start.
func setRlimits(l Limits) error {
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
	} {
		if err := set(r.res, r.v); err != nil {
			return err
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
