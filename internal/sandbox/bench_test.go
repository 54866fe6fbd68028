package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
