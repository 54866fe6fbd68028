package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/sandbox"
	"github.com/talkide/platform/internal/sandbox/sandboxtest"
)

// BenchmarkCommand measures what the sandbox adds to starting a command:
// /bin/true run bare (mode none), in the first layer, and in both, one of
// each per iteration so that all are measured in the same conditions. It
// reports each one's p50 and p99, the p50 added over bare, and the CPU
// time the helper and the command used (user and system, a figure that
// other work on the machine disturbs less than the wall clock).
//
// The layered rows run with the talkide binary as the helper (what a
// worker re-executes when no talkide-sandbox is beside it) and, as
// "-small", with cmd/talkide-sandbox, both built for the run: their
// start-up, not the test binary's, is what a worker pays. talkide is
// built as "go run" builds it, talkide-sandbox static (CGO_ENABLED=0) as
// deploy/Dockerfile builds it. Each command is handed to a helper started
// ahead, as a worker does it; the "-cold" rows start one for each
// command instead, which is what a command pays when it finds none
// waiting (several started at once). Commands are paced (pause): a
// conversation's commands come at least a model's reply apart, and a
// helper started behind the last one has that long to get ready rather
// than taking the CPU from the next row's command. Where
// bubblewrap is installed, "bwrap" runs the same command in new
// namespaces with the same read-only system, as a peer.
//
//	go test -run XXX -bench Command -benchtime 300x ./internal/sandbox/
func BenchmarkCommand(b *testing.B) {
	const pause = 100 * time.Millisecond // before each command (see above)
	talkide := filepath.Join(b.TempDir(), "talkide")
	if out, err := exec.Command("go", "build", "-o", talkide, "../../cmd/talkide").CombinedOutput(); err != nil {
		b.Fatalf("go build talkide: %v\n%s", err, out)
	}
	small := sandboxtest.SmallHelper(b)
	ws := b.TempDir()
	policy := sandbox.Policy{Path: "/bin/true", Workspace: ws, Env: []string{"PATH=/usr/bin:/bin"}}
	type mode struct {
		sandboxtest.Timings
		run func() (time.Duration, *os.ProcessState, error) // the wall time, and the state for the CPU time
	}
	var modes []*mode
	for _, o := range []struct {
		name   string
		helper string
		mode   sandbox.Mode
		cold   bool
	}{
		{"bare", talkide, sandbox.ModeNone, false},
		{"landlock", talkide, sandbox.ModeLandlock, false},
		{"namespaces", talkide, sandbox.ModeAuto, false},
		{"landlock-small", small, sandbox.ModeLandlock, false},
		{"namespaces-small", small, sandbox.ModeAuto, false},
		{"landlock-small-cold", small, sandbox.ModeLandlock, true},
		{"namespaces-small-cold", small, sandbox.ModeAuto, true},
	} {
		s, err := sandbox.New(&sandbox.Options{Mode: o.mode, Helper: o.helper, Cold: o.cold})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		if o.mode == sandbox.ModeAuto && !s.Namespaces() {
			b.Fatalf("no user namespaces here: %v", s.Layers())
		}
		warm := o.mode != sandbox.ModeNone && !o.cold
		modes = append(modes, &mode{Timings: sandboxtest.Timings{Name: o.name}, run: func() (time.Duration, *os.ProcessState, error) {
			if warm && sandbox.WaitingHelper(s, 10*time.Second) == nil {
				return 0, nil, errors.New("no helper started ahead")
			}
			// /dev/null, as a file: what the Bash tool gives is a pipe,
			// also a file, which can be handed to a waiting helper.
			devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				return 0, nil, err
			}
			defer devNull.Close()
			start := time.Now()
			c, err := s.Command(policy)
			if err != nil {
				return 0, nil, err
			}
			c.Stdout, c.Stderr = devNull, devNull
			_, err = c.Run(context.Background())
			d := time.Since(start)
			if err == nil && c.Warm() != warm {
				err = fmt.Errorf("handed to a waiting helper: %v, want %v", c.Warm(), warm)
			}
			return d, c.Exited(), err
		}})
	}
	if bwrap, err := exec.LookPath("bwrap"); err == nil {
		args := []string{"--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"}
		// The system as the namespace layer mounts it: /etc whole (which
		// Landlock then narrows to sandbox.SystemConfig; bubblewrap has no
		// such second layer), the rest path by path.
		var system []string
		for _, p := range sandbox.Existing(sandbox.DefaultReadOnly) {
			if strings.HasPrefix(p, "/etc/") {
				p = "/etc"
			}
			if !slices.Contains(system, p) {
				system = append(system, p)
			}
		}
		for _, p := range system {
			if target, err := os.Readlink(p); err == nil {
				args = append(args, "--symlink", target, p)
			} else if _, err := os.Stat(p); err == nil {
				args = append(args, "--ro-bind", p, p)
			}
		}
		args = append(args, "--bind", ws, ws, "--chdir", ws, "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "/bin/true")
		if out, err := exec.Command(bwrap, args...).CombinedOutput(); err != nil {
			b.Logf("bwrap does not run here, left out: %v %s", err, out)
		} else {
			modes = append(modes, &mode{Timings: sandboxtest.Timings{Name: "bwrap"}, run: func() (time.Duration, *os.ProcessState, error) {
				start := time.Now()
				c := exec.Command(bwrap, args...)
				err := c.Run()
				return time.Since(start), c.ProcessState, err
			}})
		}
	}
	for b.Loop() {
		for _, m := range modes {
			time.Sleep(pause)
			d, ps, err := m.run()
			if err != nil {
				b.Fatalf("%s: %v", m.Name, err)
			}
			m.Wall = append(m.Wall, d)
			m.CPU = append(m.CPU, ps.UserTime()+ps.SystemTime())
		}
	}
	rows := make([]*sandboxtest.Timings, len(modes))
	for i, m := range modes {
		rows[i] = &m.Timings
	}
	sandboxtest.Report(b, rows)
}

// BenchmarkCPUFairness measures how two commands share the CPU: one
// running a single busy process beside one running eight, started
// together and ended by their time limit (fairnessRun), with a cpu
// cgroup per command ("groups") and with the cpu hierarchy made absent
// ("threads", what a restricted pod gets: every process at nice 5). It
// reports each command's share of the CPU the two used together (their
// trees' user and system time, the supervisor's included) and the cores
// each used. With the groups the single process should get a core of
// its own where there are two or more; without, one ninth of what the
// two use. The benchmark runs in a cpu group of its own, as a worker
// runs in its container's (podGroup).
//
//	go test -run XXX -bench CPUFairness -benchtime 3x ./internal/sandbox/
func BenchmarkCPUFairness(b *testing.B) {
	const fairnessRun = 2 * time.Second
	podGroup(b)
	ws := b.TempDir()
	busy := func(n int) sandbox.Policy {
		return sandbox.Policy{
			Path: "/bin/sh", Args: []string{"-c", fmt.Sprintf("for i in $(seq %d); do sha256sum /dev/zero & done; wait", n)},
			Env: []string{"PATH=/usr/bin:/bin"}, Workspace: ws, Timeout: fairnessRun,
		}
	}
	type row struct {
		name     string
		s        *sandbox.Sandbox
		one, all time.Duration // the CPU time of the 1-process and of the 8-process command
		wall     time.Duration
	}
	var rows []*row
	for _, name := range []string{"groups", "threads"} {
		o := &sandbox.Options{Mode: sandbox.ModeLandlock, Cold: true}
		if name == "threads" {
			o = sandbox.WithCPUMount(o, b.TempDir())
		}
		s, err := sandbox.New(o)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		if s.CPUGroups() != (name == "groups") {
			b.Fatalf("%s: cpu groups %v: no cpu hierarchy the benchmark may write here", name, s.CPUGroups())
		}
		rows = append(rows, &row{name: name, s: s})
	}
	// run starts both commands of r at once and adds their CPU time.
	run := func(r *row) error {
		cmds := make([]*sandbox.Cmd, 2)
		for i, n := range []int{1, 8} {
			c, err := r.s.Command(busy(n))
			if err != nil {
				return err
			}
			cmds[i] = c
		}
		start := time.Now()
		for _, c := range cmds {
			if err := c.Start(); err != nil {
				return err
			}
		}
		for _, c := range cmds {
			if o, _ := c.Wait(); o.Ending != sandbox.EndTimeout {
				return fmt.Errorf("%s: a busy command ended %+v, want its time limit", r.name, o)
			}
		}
		r.wall += time.Since(start)
		cpu := func(c *sandbox.Cmd) time.Duration {
			ps := c.Exited()
			return ps.UserTime() + ps.SystemTime()
		}
		r.one += cpu(cmds[0])
		r.all += cpu(cmds[1])
		return nil
	}
	for b.Loop() {
		for _, r := range rows {
			if err := run(r); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, r := range rows {
		total := float64(r.one + r.all)
		b.ReportMetric(100*float64(r.one)/total, r.name+"-1proc-%")
		b.ReportMetric(100*float64(r.all)/total, r.name+"-8proc-%")
		b.ReportMetric(float64(r.one)/float64(r.wall), r.name+"-1proc-cores")
		b.ReportMetric(float64(r.all)/float64(r.wall), r.name+"-8proc-cores")
	}
}

// podGroup moves this process into a cpu group of its own (v1) for the
// benchmark's time, as a worker runs in its container's group. In the
// root group, where the tests run on a plain machine, the kernel's
// autogroups share the CPU by session, and each command is a session of
// its own (until it starts more): a pod's group has no autogroups.
func podGroup(b *testing.B) {
	mount, err := sandbox.CgroupMount("cpu")
	if err != nil {
		b.Fatal(err)
	}
	own, err := sandbox.CgroupPath(os.Getpid(), "cpu")
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(mount, own, fmt.Sprintf("talkide-bench-%d", os.Getpid()))
	enter := func(dir string) error {
		return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatalf("a cpu group for the benchmark: %v", err)
	}
	if err := enter(dir); err != nil {
		os.Remove(dir)
		b.Fatalf("a cpu group for the benchmark: %v", err)
	}
	b.Cleanup(func() {
		enter(filepath.Join(mount, own))
		os.Remove(dir)
	})
}
