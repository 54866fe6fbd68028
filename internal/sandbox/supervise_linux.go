package sandbox

import (
	"encoding/json"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/talkide/platform/internal/proctree"
)

// Watchdog intervals: how often the supervisor counts the tree's
// processes and memory. Inside a PID namespace the count is a read of a
// small /proc; outside, a walk of the tree.
const (
	watchNamespace = 10 * time.Millisecond
	watchHost      = 50 * time.Millisecond
)

// termGrace is how long the tree has between SIGTERM and SIGKILL when the
// supervisor ends it early (time limit, Stop); what is left when the
// command itself has exited gets SIGKILL at once.
const termGrace = 500 * time.Millisecond

// supervise is stage 1. It becomes the reaper of the command's tree (PID 1
// of its namespace, or a child subreaper), builds the namespace's root and
// proxies when there is one, starts stage 2, and then watches: when the
// command exits, runs out of time, processes or memory, or the worker asks
// it to stop, it kills everything left in the tree, writes the outcome and
// exits with the command's status.
func supervise(cfg helperConfig, status *os.File, fail func(string, ...any)) int {
	result := os.NewFile(fdResult, "result")
	// The worker's pipes must not leak into the command: the status pipe
	// has to close once the command runs, and the result is the
	// supervisor's alone.
	unix.CloseOnExec(fdResult)
	if fd := int(status.Fd()); fd != 2 {
		unix.CloseOnExec(fd)
	}
	p := cfg.Policy
	if !cfg.CgroupByWorker {
		// Before anything is started: every process of the tree is born
		// inside.
		for _, dir := range cfg.Cgroups {
			if err := enterCgroup(dir, 0); err != nil {
				fail("sandbox: cgroup: %v", err)
			}
		}
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fail("sandbox: subreaper: %v", err)
	}
	if cfg.Namespaces {
		sockets, err := buildRoot(cfg)
		if err != nil {
			fail("sandbox: namespace: %v", err)
		}
		if err := loopbackUp(); err != nil {
			fail("sandbox: loopback: %v", err)
		}
		if err := forward(p.Ports, sockets); err != nil {
			fail("sandbox: proxies: %v", err)
		}
	}
	// Signals first, so that no SIGCHLD or SIGTERM is lost between
	// starting the command and watching.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	// rlimits are the process's: the supervisor's own too, which it
	// easily stays within.
	if err := setRlimits(p.Limits, cfg.Marker); err != nil {
		fail("sandbox: rlimits: %v", err)
	}
	cfg.InNamespace = cfg.Namespaces
	if cfg.CgroupByWorker {
		// The worker is moving this process into the cgroup; nothing is
		// started before it has (it closes the pipe either way, and when
		// it failed it kills this process).
		goAhead := os.NewFile(fdGoAhead, "go-ahead")
		io.Copy(io.Discard, goAhead)
		goAhead.Close()
	}
	pid, err := startConfined(cfg)
	if err != nil {
		fail("sandbox: %v", err)
	}
	if status.Fd() != 2 {
		status.Close() // the command runs: the worker's Start returns
	}

	var timeout <-chan time.Time
	if p.Timeout > 0 {
		t := time.NewTimer(p.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	interval := watchHost
	if cfg.Namespaces {
		interval = watchNamespace
	}
	watch := time.NewTicker(interval)
	defer watch.Stop()

	res := helperResult{Ending: EndExited}
	grace := time.Duration(0)
loop:
	for {
		select {
		case s := <-sigs:
			if s != syscall.SIGCHLD {
				res.Ending, grace = EndStopped, termGrace
				break loop
			}
			if ws, done := reap(pid); done {
				res.ExitCode, res.Signal = exitOf(ws)
				break loop
			}
		case <-timeout:
			res.Ending, grace = EndTimeout, termGrace
			break loop
		case <-watch.C:
			// A SIGCHLD may have been merged with another; look anyway.
			if ws, done := reap(pid); done {
				res.ExitCode, res.Signal = exitOf(ws)
				break loop
			}
			tasks, rss := treeUsage(cfg.Namespaces)
			switch {
			case tasks > p.Limits.MaxProcs:
				res.Ending = EndProcs
				break loop
			case rss > p.Limits.MaxMemory:
				res.Ending = EndMemory
				break loop
			}
		}
	}
	if res.Ending != EndExited {
		res.ExitCode, res.Signal = -1, int(syscall.SIGKILL)
	}
	killTree(cfg.Namespaces, grace, pid, &res)
	b, _ := json.Marshal(res)
	result.Write(b)
	result.Close()
	if res.Signal != 0 {
		return 128 + res.Signal
	}
	return res.ExitCode
}

// reap collects every exited child; done is true once pid is among them.
func reap(pid int) (ws syscall.WaitStatus, done bool) {
	for {
		var s syscall.WaitStatus
		got, err := syscall.Wait4(-1, &s, syscall.WNOHANG, nil)
		if err != nil || got <= 0 {
			return ws, done
		}
		if got == pid {
			ws, done = s, true
		}
	}
}

func exitOf(ws syscall.WaitStatus) (code, sig int) {
	if ws.Signaled() {
		return -1, int(ws.Signal())
	}
	return ws.ExitStatus(), 0
}

// killTree ends every process left in the tree: SIGTERM first when grace
// is set, then SIGKILL, until no child is left to reap. Inside a PID
// namespace kill(-1) reaches every process but the supervisor; outside,
// the tree is walked, and orphans of the tree come back to the
// supervisor as its subreaper. The command's own status is recorded if it
// ends here.
func killTree(ns bool, grace time.Duration, pid int, res *helperResult) {
	signalAll := func(sig syscall.Signal) {
		if ns {
			syscall.Kill(-1, sig)
			return
		}
		syscall.Kill(-pid, sig)
		for _, d := range proctree.Descendants(os.Getpid()) {
			syscall.Kill(d, sig)
		}
	}
	collect := func() bool { // reports whether children are left
		for {
			var s syscall.WaitStatus
			got, err := syscall.Wait4(-1, &s, syscall.WNOHANG, nil)
			if err != nil {
				return false // ECHILD: none left
			}
			if got == 0 {
				return true
			}
			if got == pid && res.Ending == EndExited {
				res.ExitCode, res.Signal = exitOf(s)
			}
		}
	}
	if grace > 0 {
		signalAll(syscall.SIGTERM)
		deadline := time.Now().Add(grace)
		for time.Now().Before(deadline) && collect() {
			time.Sleep(5 * time.Millisecond) // polling children that are exiting
		}
	}
	for collect() {
		signalAll(syscall.SIGKILL)
		var s syscall.WaitStatus
		// Block for one exit, so that the loop does not spin while the
		// kernel tears the processes down.
		if got, err := syscall.Wait4(-1, &s, 0, nil); err == nil && got == pid && res.Ending == EndExited {
			res.ExitCode, res.Signal = exitOf(s)
		}
	}
}

// treeUsage counts the tree's tasks (threads, which RLIMIT_NPROC counts
// too) and their resident memory.
func treeUsage(ns bool) (tasks int, rss int64) {
	var pids []int
	if ns {
		ents, _ := os.ReadDir("/proc")
		self := os.Getpid()
		for _, e := range ents {
			if n, err := strconv.Atoi(e.Name()); err == nil && n != self {
				pids = append(pids, n)
			}
		}
	} else {
		pids = proctree.Descendants(os.Getpid())
	}
	page := int64(os.Getpagesize())
	for _, p := range pids {
		f := proctree.Stat(p)
		// After the command name: state is 0, num_threads 17, rss 21.
		if len(f) < 22 {
			continue // gone meanwhile
		}
		n, err := strconv.Atoi(f[17])
		if err != nil {
			continue
		}
		tasks += n
		if pages, err := strconv.ParseInt(f[21], 10, 64); err == nil {
			rss += pages * page
		}
	}
	return tasks, rss
}
