package sandbox_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/talkide/platform/internal/sandbox"
)

// wantCPUGroups says whether this machine must give each command a cpu
// cgroup of its own: where the tests run as root, unless
// TALKIDE_TEST_SANDBOX=landlock says they run in a restricted container
// (the worker's pod), whose cgroups nothing inside may write.
func wantCPUGroups() bool {
	return os.Getuid() == 0 && os.Getenv("TALKIDE_TEST_SANDBOX") != "landlock"
}

// sleeper is a command that has printed its nice value and sleeps.
type sleeper struct {
	c    *sandbox.Cmd
	pid  int // the sleep's, as this process sees it
	nice string
}

var sleeperSeq atomic.Int64

// startSleeper starts, in s, a command that prints its nice value and
// then sleeps until stopped, with limits l.
func startSleeper(t *testing.T, s *sandbox.Sandbox, e env, l sandbox.Limits) *sleeper {
	t.Helper()
	arg := fmt.Sprintf("%d.%d", 600+os.Getpid()%300, sleeperSeq.Add(1))
	c, err := s.Command(sandbox.Policy{
		Path: "/bin/sh", Args: []string{"-c", "nice; exec sleep " + arg},
		Env: []string{"PATH=/usr/bin:/bin"}, Workspace: e.workspace, Timeout: time.Minute, Limits: l,
	})
	if err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	c.Stdout, c.Stderr = pw, pw
	err = c.Start()
	pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		c.Wait()
	})
	nice, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("the command's nice value: %q, %v", nice, err)
	}
	var pids []int
	for deadline := time.Now().Add(10 * time.Second); len(pids) != 1; pids = processesRunning("sleep\x00" + arg + "\x00") {
		if time.Now().After(deadline) {
			t.Fatalf("the command's sleep: %v", pids)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return &sleeper{c: c, pid: pids[0], nice: strings.TrimSpace(nice)}
}

// end stops the command and waits until its groups are removed.
func (sl *sleeper) end() {
	sl.c.Stop()
	sl.c.Wait()
	sl.c.Exited()
}

// TestCPUGroupPerCommand: each command runs in a cpu cgroup of its own,
// beside the worker (never around it), of the common weight, with the
// ceiling its limits ask for, and the group is gone once the command is.
// Two commands at once get two groups; one goes to the helper started
// ahead where there is one, whose group was made before its command came;
// a third, started by its caller, has its supervisor enter its groups.
// Where no cpu group is expected the command shares the worker's, at
// nice 5.
func TestCPUGroupPerCommand(t *testing.T) {
	self, err := sandbox.CgroupPath(os.Getpid(), "cpu")
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range modes(t) {
		t.Run(name, func(t *testing.T) {
			if s.CPUGroups() != wantCPUGroups() {
				t.Fatalf("cpu groups: %v, want %v (root: %v)", s.CPUGroups(), wantCPUGroups(), os.Getuid() == 0)
			}
			e := newEnv(t)
			if warm, _ := warmModes.Load(s); warm == true && sandbox.WaitingHelper(s, 30*time.Second) == nil {
				t.Fatal("no helper started ahead of the command")
			}
			halfCPU := startSleeper(t, s, e, sandbox.Limits{CPUs: 0.5})
			unbounded := startSleeper(t, s, e, sandbox.Limits{})
			groups := map[string]bool{}
			for _, sl := range []*sleeper{halfCPU, unbounded} {
				if sl.nice != "5" {
					t.Errorf("the command's nice value: %q, want 5", sl.nice)
				}
				path, err := sandbox.CgroupPath(sl.pid, "cpu")
				if err != nil {
					t.Fatal(err)
				}
				if !wantCPUGroups() {
					if path != self {
						t.Errorf("the command's cpu group %s, want the worker's %s", path, self)
					}
					continue
				}
				if want := filepath.Join(self, fmt.Sprintf("talkide-sandbox-%d", os.Getpid())); filepath.Dir(path) != want {
					t.Errorf("the command's cpu group %s, want one in %s, beside the worker in %s", path, want, self)
				}
				groups[path] = true
				mount, err := sandbox.CgroupMount("cpu")
				if err != nil {
					t.Fatal(err)
				}
				ceiling := sl == halfCPU
				checkCPUGroup(t, filepath.Join(mount, path), ceiling)
			}
			if wantCPUGroups() && len(groups) != 2 {
				t.Errorf("two commands, cpu groups %v", groups)
			}
			halfCPU.end()
			unbounded.end()
			// A command its caller starts (ExecCommand): the supervisor
			// enters the groups itself.
			c, err := s.ExecCommand(t.Context(), sandbox.Policy{Path: "/bin/cat", Args: []string{"/proc/self/cgroup"}, Workspace: e.workspace})
			if err != nil {
				t.Fatal(err)
			}
			out, err := c.Cmd.Output()
			c.Release()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			path, err := sandbox.CgroupPathOf(out, "cpu")
			if err != nil {
				t.Fatal(err)
			}
			if wantCPUGroups() == (path == self) {
				t.Errorf("a command its caller started: cpu group %s, the worker's %s (cpu groups: %v)", path, self, wantCPUGroups())
			}
			if wantCPUGroups() {
				groups[path] = true
			}
			mount, _ := sandbox.CgroupMount("cpu")
			for g := range groups {
				if _, err := os.Stat(filepath.Join(mount, g)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the cpu group %s outlived its command: %v", g, err)
				}
			}
		})
	}
}

// checkCPUGroup checks a command's cpu group's weight and ceiling (half
// a CPU, or none).
func checkCPUGroup(t *testing.T, dir string, ceiling bool) {
	t.Helper()
	read := func(file string) string {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	if _, err := os.Stat(filepath.Join(dir, "cpu.shares")); err == nil { // v1
		quota := "-1"
		if ceiling {
			quota = "50000"
		}
		if got := read("cpu.shares"); got != "1024" {
			t.Errorf("%s: cpu.shares %s, want 1024", dir, got)
		}
		if got, period := read("cpu.cfs_quota_us"), read("cpu.cfs_period_us"); got != quota || period != "100000" {
			t.Errorf("%s: cpu.cfs_quota_us %s per %s, want %s per 100000", dir, got, period, quota)
		}
		return
	}
	quota := "max 100000"
	if ceiling {
		quota = "50000 100000"
	}
	if got := read("cpu.weight"); got != "100" {
		t.Errorf("%s: cpu.weight %s, want 100", dir, got)
	}
	if got := read("cpu.max"); got != quota {
		t.Errorf("%s: cpu.max %s, want %s", dir, got, quota)
	}
}

// TestNoCPUHierarchy: where the worker can make no cpu group (no
// hierarchy there, nothing of one, not a directory) the sandbox says so
// once at start, leaves nothing behind, and runs each command in the
// worker's own cpu group at nice 5.
func TestNoCPUHierarchy(t *testing.T) {
	self, err := sandbox.CgroupPath(os.Getpid(), "cpu")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, mount := range map[string]string{
		"plain directory": t.TempDir(),
		"missing":         filepath.Join(t.TempDir(), "missing"),
		"a file":          file,
	} {
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			s, err := sandbox.New(sandbox.WithCPUMount(&sandbox.Options{
				Mode: sandbox.ModeLandlock, Cold: true, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			}, mount))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.CPUGroups() {
				t.Fatal("cpu groups in a hierarchy that is none")
			}
			e := newEnv(t)
			for range 2 {
				sl := startSleeper(t, s, e, sandbox.Limits{CPUs: 0.5})
				if sl.nice != "5" {
					t.Errorf("the command's nice value: %q, want 5", sl.nice)
				}
				if path, err := sandbox.CgroupPath(sl.pid, "cpu"); err != nil || path != self {
					t.Errorf("the command's cpu group %s (%v), want the worker's %s", path, err, self)
				}
				sl.end()
			}
			if n := strings.Count(logs.String(), "no cpu cgroup per command"); n != 1 {
				t.Errorf("said %d times that there is no cpu cgroup, want once:\n%s", n, logs.String())
			}
			if fi, err := os.Stat(mount); err == nil && fi.IsDir() {
				if ents, _ := os.ReadDir(mount); len(ents) > 0 {
					t.Errorf("left in %s: %v", mount, ents)
				}
			}
		})
	}
}

// The sandbox's own ceiling (Options.Limits.CPUs, the worker's
// --sandbox-cpus) bounds a command whose policy sets none; where commands
// get no cpu group, the command runs in the worker's and nothing else
// changes.
func TestSandboxWideCPUCeiling(t *testing.T) {
	s, err := sandbox.New(&sandbox.Options{Mode: sandbox.ModeLandlock, Cold: true, Limits: sandbox.Limits{CPUs: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	sl := startSleeper(t, s, newEnv(t), sandbox.Limits{})
	path, err := sandbox.CgroupPath(sl.pid, "cpu")
	if err != nil {
		t.Fatal(err)
	}
	if !wantCPUGroups() {
		if self, err := sandbox.CgroupPath(os.Getpid(), "cpu"); err != nil || path != self {
			t.Errorf("the command's cpu group %s, want the worker's %s (%v)", path, self, err)
		}
		return
	}
	mount, err := sandbox.CgroupMount("cpu")
	if err != nil {
		t.Fatal(err)
	}
	checkCPUGroup(t, filepath.Join(mount, path), true)
}

// TestSandboxesShareTheParentGroup: the parent cgroup is the process's,
// and several Sandboxes may share it (the development stack runs workers
// side by side in one process). One closing leaves the group to the
// others: a command of another still runs, in a group of its own in it.
// The last one to close removes it.
func TestSandboxesShareTheParentGroup(t *testing.T) {
	if !wantCPUGroups() {
		t.Skip("no cpu cgroup per command on this machine (not root, or TALKIDE_TEST_SANDBOX=landlock)")
	}
	self, err := sandbox.CgroupPath(os.Getpid(), "cpu")
	if err != nil {
		t.Fatal(err)
	}
	mount, err := sandbox.CgroupMount("cpu")
	if err != nil {
		t.Fatal(err)
	}
	parent := filepath.Join(self, fmt.Sprintf("talkide-sandbox-%d", os.Getpid()))
	open := func() *sandbox.Sandbox {
		s, err := sandbox.New(&sandbox.Options{Mode: sandbox.ModeLandlock, Cold: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first, second := open(), open()
	defer second.Close()
	first.Close()
	first.Close() // a second Close releases nothing more
	e := newEnv(t)
	out, o, err := run(t, second, e, "cat /proc/self/cgroup")
	if err != nil || o.ExitCode != 0 {
		t.Fatalf("a command after another Sandbox closed: %v %+v %s", err, o, out)
	}
	path, err := sandbox.CgroupPathOf([]byte(out), "cpu")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(path) != parent {
		t.Errorf("the command's cpu group %s, want one in %s", path, parent)
	}
	second.Close()
	if _, err := os.Stat(filepath.Join(mount, parent)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the parent group %s outlived the last Sandbox: %v", parent, err)
	}
}
