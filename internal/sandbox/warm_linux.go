package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The helper is a Go program: loading it, the runtime's start and its
// packages' initialisation take milliseconds of a command's time on a fast
// machine and tens of them on a slow virtual one, where bubblewrap, a C
// program, starts in a few. So a Sandbox keeps one helper started ahead of
// need. It starts, initialises and then waits on a socket for a command:
// the worker hands it the command's configuration and files (its stdio and
// the pipes a helper otherwise inherits) in one message, and the helper
// goes on exactly as a helper started for the command would, from the same
// file descriptors. A new one is started behind each one taken. A command
// that finds none ready (several started at once, or the first of a
// Sandbox) starts a helper of its own, as does every command whose caller
// starts the process itself (ExecCommand) or leaves exec to make its
// pipes: their latency matters less than the order of their files.
//
// What waits holds nothing of any command: it was started with an empty
// environment, in "/", with the sandbox's namespaces but no root built in
// them, and it learns its command only from the socket, whose other end
// only the worker has.

// warmArg, after HelperArg, makes the helper wait for its command on fd 3.
const warmArg = "warm"

// maxCallFiles is how many files a call hands over: stdin, stdout,
// stderr and the helper's fds 3 to 6 (fdConfig … fdGoAhead).
const maxCallFiles = 7

// warmHelper is a helper that has been started and waits for a command.
type warmHelper struct {
	cmd  *exec.Cmd
	sock *os.File // the worker's end of the socket pair
	// groups are its command's cgroups, which it sits in already; the
	// command's to remove once handed, discard's before that.
	groups  cmdGroups
	cgroups *cgroups
}

// discard ends a helper that no command will take.
func (h *warmHelper) discard() {
	h.sock.Close() // it exits when it reads the end
	h.cmd.Process.Kill()
	h.cmd.Wait()
	if h.cgroups != nil {
		h.cgroups.remove(h.groups)
	}
}

// startWarm starts a helper that waits for a command.
func (s *Sandbox) startWarm() (*warmHelper, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "warm-helper"), os.NewFile(uintptr(fds[1]), "warm-helper")
	defer theirs.Close()
	// The helper's fds 4 to 6 are held by the null device until the
	// command's pipes take their places: left free, the Go runtime would
	// open its own files there as it starts (its poller, the cgroup's
	// CPU quota), and receiveCall would close them under it.
	null, err := os.Open(os.DevNull)
	if err != nil {
		ours.Close()
		return nil, err
	}
	defer null.Close()
	cmd := s.helperCmd(warmArg)
	cmd.ExtraFiles = []*os.File{theirs, null, null, null} // fds 3 to 6
	if err := cmd.Start(); err != nil {
		ours.Close()
		return nil, err
	}
	h := &warmHelper{cmd: cmd, sock: ours, cgroups: s.cgroups}
	if s.cgroups != nil {
		// Its command's cgroups, entered now: moving a process into a
		// cgroup waits for an RCU grace period, milliseconds that a
		// command handed to it then does not wait for.
		g, err := s.cgroups.create(s.opts.Limits)
		if err == nil {
			h.groups = g
			err = g.enter(cmd.Process.Pid)
		}
		if err != nil {
			h.discard()
			return nil, fmt.Errorf("cgroup: %w", err)
		}
	}
	return h, nil
}

// keepWarm keeps one helper waiting until the Sandbox closes: it starts
// one whenever wanted says the last was taken (refillLater). A helper
// that cannot be started is tried again later; commands start their own
// meanwhile.
func (s *Sandbox) keepWarm() {
	defer s.warmLoop.Done()
	var retry time.Duration
	// What starts the next helper: a command wanting one or, after a
	// failure, the retry's time (never both).
	wanted, retryAt := s.wanted, (<-chan time.Time)(nil)
	for {
		select {
		case <-wanted:
		case <-retryAt:
		case <-s.closing:
			return
		}
		h, err := s.startWarm()
		if err != nil {
			if retry == 0 {
				s.opts.Logger.Warn("sandbox: a helper could not be started ahead of its command; each command starts its own", "err", err)
			}
			retry = min(max(2*retry, 100*time.Millisecond), 30*time.Second)
			wanted, retryAt = nil, time.After(retry)
			continue
		}
		retry, wanted, retryAt = 0, s.wanted, nil
		s.warmMu.Lock()
		closed := s.warmClosed
		if !closed {
			s.ready = h
		}
		s.warmMu.Unlock()
		if closed {
			h.discard()
			return
		}
	}
}

// startKeepingWarm starts keepWarm once; the caller holds warmMu.
func (s *Sandbox) startKeepingWarm() {
	if s.warmStarted || s.warmClosed {
		return
	}
	s.warmStarted = true
	s.wanted = make(chan struct{}, 1)
	s.closing = make(chan struct{})
	s.wanted <- struct{}{}
	s.warmLoop.Add(1)
	go s.keepWarm()
}

// takeWarm returns the waiting helper, or nil when none is ready; the
// first call starts keeping one.
func (s *Sandbox) takeWarm() *warmHelper {
	s.warmMu.Lock()
	defer s.warmMu.Unlock()
	s.startKeepingWarm()
	h := s.ready
	s.ready = nil
	return h
}

// refillAfter is how long a command handed to the waiting helper runs
// before the next helper is started, unless it ends sooner. A helper's
// start takes tens of milliseconds of CPU on a slow machine: started at
// once, it would take them from the very command it replaces, most of
// which end within a few milliseconds. Started later, it is still ready
// long before the model's next command, and a command that runs long does
// not keep the one beside it from finding a helper.
const refillAfter = 100 * time.Millisecond

// refillLater has the next helper started when c ends, or after
// refillAfter.
func (c *Cmd) refillLater() {
	c.refill = sync.OnceFunc(c.s.wantWarm)
	c.refillTimer = time.AfterFunc(refillAfter, c.refill)
}

// wantWarm has keepWarm start the next helper.
func (s *Sandbox) wantWarm() {
	select {
	case s.wanted <- struct{}{}:
	default:
	}
}

// stopWarm ends the waiting helper and keeps no other.
func (s *Sandbox) stopWarm() {
	s.warmMu.Lock()
	h := s.ready
	s.ready = nil
	if !s.warmClosed && s.warmStarted {
		close(s.closing)
	}
	s.warmClosed = true
	s.warmMu.Unlock()
	if h != nil {
		h.discard()
	}
	s.warmLoop.Wait()
}

// warmable reports whether the command can run in a waiting helper: it
// reports through the status pipe (Command; mode none and ExecCommand
// have none), and its stdio are files or nothing, which can be handed
// over as they are.
func (c *Cmd) warmable() bool {
	if c.s.opts.Cold || c.cfg.StatusFD != fdStatus || c.execPipes {
		return false
	}
	return c.stdioFiles()
}

// stdioFiles reports whether the command's stdin, stdout and stderr are
// files or nothing: what can be handed over as it is, and what exec.Cmd
// copies nothing for.
func (c *Cmd) stdioFiles() bool {
	return handable(c.Cmd.Stdin) && handable(c.Cmd.Stdout) && handable(c.Cmd.Stderr)
}

// handable reports whether one of them is a file, or nothing.
func handable(v any) bool {
	if v == nil {
		return true
	}
	f, ok := v.(*os.File)
	return ok && f != nil
}

// hand gives the command to h: its stdio and the helper's files, in one
// message. On success the helper has them, and the command's exec.Cmd is
// h's; on failure (h died while it waited) h is gone and the command can
// start a helper of its own.
func (c *Cmd) hand(h *warmHelper) error {
	files := make([]*os.File, 0, maxCallFiles)
	var opened []*os.File
	defer func() {
		for _, f := range opened {
			f.Close()
		}
	}()
	fail := func(err error) error {
		h.discard()
		c.s.wantWarm() // in its place
		return err
	}
	std := []any{c.Cmd.Stdin, c.Cmd.Stdout, c.Cmd.Stderr}
	for i, v := range std {
		if f, ok := v.(*os.File); ok {
			files = append(files, f)
			continue
		}
		// Nothing given: the null device, as exec.Cmd does it.
		flag := os.O_WRONLY
		if i == 0 {
			flag = os.O_RDONLY
		}
		f, err := os.OpenFile(os.DevNull, flag, 0)
		if err != nil {
			return fail(err)
		}
		opened = append(opened, f)
		files = append(files, f)
	}
	files = append(files, c.Cmd.ExtraFiles...)
	if len(files) > maxCallFiles {
		return fail(fmt.Errorf("sandbox: %d files for the helper", len(files)))
	}
	fds := make([]int, len(files))
	for i, f := range files {
		// Fd makes a file blocking, as exec.Cmd leaves a child's files.
		fds[i] = int(f.Fd())
	}
	err := unix.Sendmsg(int(h.sock.Fd()), []byte{byte(len(fds))}, unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL)
	runtime.KeepAlive(files)
	h.sock.Close()
	if err != nil {
		return fail(err)
	}
	c.Cmd = h.cmd
	c.warm = true
	c.refillLater()
	return nil
}

// receiveCall is the waiting helper's side: it takes the files of its
// command and puts each where a helper started for the command would have
// it (stdin, stdout, stderr, then fdConfig onwards, fd 3 the socket
// closing as the configuration takes its place). It reports false when
// the worker let it go without a command, or sent what it cannot use.
func receiveCall() (bool, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4*maxCallFiles))
	n, oobn, flags, _, err := unix.Recvmsg(fdConfig, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return false, fmt.Errorf("sandbox: the helper's command: %w", err)
	}
	if n == 0 {
		return false, nil // the worker closed its end: no command comes
	}
	var fds []int
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err == nil {
		for i := range msgs {
			got, perr := unix.ParseUnixRights(&msgs[i])
			if perr != nil {
				err = perr
			}
			fds = append(fds, got...)
		}
	}
	if err != nil || flags&unix.MSG_CTRUNC != 0 || len(fds) != int(buf[0]) || len(fds) < fdResult+1 || len(fds) > maxCallFiles {
		return false, errors.New("sandbox: the helper's command came without its files")
	}
	// Received files take the lowest free numbers, which may be the ones
	// others are due at: each is moved above them first.
	high := make([]int, len(fds))
	for i, fd := range fds {
		if high[i], err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 64); err != nil {
			return false, fmt.Errorf("sandbox: the helper's files: %w", err)
		}
		unix.Close(fd)
	}
	for i, fd := range high {
		if err := unix.Dup3(fd, i, 0); err != nil {
			return false, fmt.Errorf("sandbox: the helper's files: %w", err)
		}
		unix.Close(fd)
	}
	// The placeholders no file took (the go-ahead's, when the worker
	// moves nothing into a cgroup) are not the command's to inherit.
	for fd := len(high); fd < maxCallFiles; fd++ {
		unix.Close(fd)
	}
	return true, nil
}

// rehearse runs, on made-up input, the code a helper runs for its command
// before and after the command itself. A fresh process pays for the first
// use of each page of its code and memory with a fault, and a slow virtual
// machine makes those faults milliseconds in all: a waiting helper pays
// them before its command comes rather than on its way.
func rehearse() {
	sample := helperConfig{
		Stage: 1, ReadOnly: DefaultReadOnly, StatusFD: fdStatus, Helper: "/helper", RootDir: "/root",
		Policy: Policy{
			Path: "/bin/sh", Args: []string{"-c", "true"}, Env: []string{"PATH=/usr/bin:/bin", "HOME=/w"},
			Dir: "/w", Workspace: "/w", Writable: []string{"/tmp/w"}, ReadOnly: []string{"/opt/x"},
			Ports: []int{1}, Sockets: map[int]string{1: "/s"}, Timeout: time.Minute, Limits: defaultLimits,
		},
	}
	if f, err := configFile(sample); err == nil {
		readConfig(f)
	}
	json.Marshal(helperResult{Ending: EndExited, ExitCode: 1, Signal: 9})
	// The first Notify starts the runtime's signal watcher.
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	signal.Stop(ch)
	var r unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &r)
}
