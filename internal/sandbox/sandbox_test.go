package sandbox_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/talkide/platform/internal/proctest"
	"github.com/talkide/platform/internal/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.RunHelper()
	code := m.Run()
	if smallBin != "" {
		os.RemoveAll(filepath.Dir(smallBin))
	}
	os.Exit(code)
}

// wantLayers says which layers this machine must give the tests: all of
// them unless TALKIDE_TEST_SANDBOX=landlock says it has no user
// namespaces. A missing layer fails the tests that need it, never skips
// them, so that CI cannot pass without testing it.
func wantNamespaces() bool { return os.Getenv("TALKIDE_TEST_SANDBOX") != "landlock" }

// modes are the sandboxes the tests run under: the first layer alone, and
// both; each with the test binary as the helper (as a worker re-executes
// itself), started for each command, and, "-small", with
// cmd/talkide-sandbox, started ahead of each command (run waits for it, so
// that every command of these modes is handed to a waiting helper).
func modes(t *testing.T) map[string]*sandbox.Sandbox {
	t.Helper()
	out := map[string]*sandbox.Sandbox{}
	for suffix, helper := range map[string]string{"": "", "-small": smallHelper(t)} {
		cold := helper == ""
		ll, err := sandbox.New(&sandbox.Options{Mode: sandbox.ModeLandlock, Helper: helper, Cold: cold})
		if err != nil {
			t.Fatal(err)
		}
		if err := ll.Unavailable(); err != nil {
			t.Fatalf("the first layer is missing on this machine: %v", err)
		}
		t.Cleanup(ll.Close)
		out["landlock"+suffix] = ll
		warmModes.Store(ll, !cold)
		if wantNamespaces() {
			ns, err := sandbox.New(&sandbox.Options{Helper: helper, Cold: cold})
			if err != nil {
				t.Fatal(err)
			}
			if !ns.Namespaces() {
				t.Fatalf("user namespaces are missing on this machine (set TALKIDE_TEST_SANDBOX=landlock where that is expected): layers %v", ns.Layers())
			}
			t.Cleanup(ns.Close)
			out["namespaces"+suffix] = ns
			warmModes.Store(ns, !cold)
		}
	}
	return out
}

// warmModes says, for each sandbox of modes, whether its commands are
// handed to a helper started ahead.
var warmModes sync.Map

var (
	smallOnce sync.Once
	smallBin  string
	smallErr  error
)

// smallHelper builds cmd/talkide-sandbox once for the test binary, or
// returns TALKIDE_TEST_SANDBOX_HELPER: a built one, where the tests run
// without Go (inside the worker's pod, e2e/cluster).
func smallHelper(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TALKIDE_TEST_SANDBOX_HELPER"); p != "" {
		return p
	}
	smallOnce.Do(func() {
		dir, err := os.MkdirTemp("", "talkide-sandbox-test-")
		if err != nil {
			smallErr = err
			return
		}
		smallBin = filepath.Join(dir, "talkide-sandbox")
		if out, err := exec.Command("go", "build", "-o", smallBin, "../../cmd/talkide-sandbox").CombinedOutput(); err != nil {
			smallErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if smallErr != nil {
		t.Fatal(smallErr)
	}
	return smallBin
}

// env is a conversation as the worker lays it out: a workspace among
// others, and files the command must not reach.
type env struct {
	root, workspace, other, secret string
}

func newEnv(t *testing.T) env {
	t.Helper()
	root := t.TempDir()
	e := env{root: root,
		workspace: filepath.Join(root, "workspaces", "conv-a"),
		other:     filepath.Join(root, "workspaces", "conv-b"),
		secret:    filepath.Join(root, "worker", "identity-token")}
	for _, d := range []string{e.workspace, e.other, filepath.Dir(e.secret)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(e.secret, []byte("tki_secret\n"), 0o600)
	os.WriteFile(filepath.Join(e.other, "notes.txt"), []byte("B's notes\n"), 0o644)
	return e
}

// run runs script with bash in the sandbox and returns its output.
func run(t *testing.T, s *sandbox.Sandbox, e env, script string, edit ...func(*sandbox.Policy)) (string, sandbox.Outcome, error) {
	t.Helper()
	p := sandbox.Policy{
		Path: "/bin/bash", Args: []string{"-c", script},
		Env:       []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + e.workspace, "LANG=C.UTF-8"},
		Workspace: e.workspace,
		Timeout:   30 * time.Second,
	}
	for _, f := range edit {
		f(&p)
	}
	warm, _ := warmModes.Load(s)
	if warm == true && sandbox.WaitingHelper(s, 30*time.Second) == nil {
		t.Fatal("no helper started ahead of the command")
	}
	c, err := s.Command(p)
	if err != nil {
		return "", sandbox.Outcome{}, err
	}
	out, o, err := runPiped(t, c)
	if warm != nil && c.Warm() != warm {
		t.Errorf("command handed to a helper started ahead: %v, want %v", c.Warm(), warm)
	}
	return out, o, err
}

// runPiped runs c with its stdout, and its stderr unless set, on a pipe,
// as the Bash tool gives a command (a file can be handed to a helper
// started ahead, where exec.Cmd would copy into a buffer), and returns
// what the pipe carried. A minute ends it.
func runPiped(t *testing.T, c *sandbox.Cmd) (string, sandbox.Outcome, error) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	c.Stdout = pw
	if c.Stderr == nil {
		c.Stderr = pw
	}
	err = c.Start()
	pw.Close()
	if err != nil {
		return "", sandbox.Outcome{}, err
	}
	var out bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		io.Copy(&out, pr)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stop := context.AfterFunc(ctx, c.Stop)
	o, err := c.Wait()
	stop()
	<-read
	return out.String(), o, err
}

func TestRunsInTheWorkspace(t *testing.T) {
	for name, s := range modes(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			out, o, err := run(t, s, e, `pwd; echo hi > made.txt; cat made.txt; mkdir -p sub/dir && echo ok > sub/dir/f && cat sub/dir/f; exit 3`)
			var ee *sandbox.ExitError
			if !errors.As(err, &ee) || o.ExitCode != 3 || o.Ending != sandbox.EndExited {
				t.Fatalf("outcome %+v, %v; output:\n%s", o, err, out)
			}
			if want := e.workspace + "\nhi\nok\n"; out != want {
				t.Errorf("output %q, want %q", out, want)
			}
			if b, _ := os.ReadFile(filepath.Join(e.workspace, "made.txt")); string(b) != "hi\n" {
				t.Errorf("made.txt holds %q", b)
			}
		})
	}
}

// TestUserlandWorks: what programs read of /etc is there: names of
// users and hosts, certificates, the loader's cache, the time zone.
func TestUserlandWorks(t *testing.T) {
	for name, s := range modes(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			out, _, err := run(t, s, e, `id -un; getent hosts localhost | wc -l; test -r /etc/ssl/certs/ca-certificates.crt && echo certs; `+
				`test -r /etc/ld.so.cache && echo loader; date +%Z`)
			if err != nil || !strings.Contains(out, "certs\nloader\n") || strings.HasPrefix(out, "id:") || strings.Contains(out, "\n0\n") {
				t.Errorf("%v; output %q", err, out)
			}
		})
	}
}

// TestHidesEverythingElse: the other conversation, the worker's token and
// the host's files outside the allow-list are out of reach, for reading
// and for writing, directly and through a symlink planted in the
// workspace.
func TestHidesEverythingElse(t *testing.T) {
	for name, s := range modes(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			os.Symlink(e.other, filepath.Join(e.workspace, "link-to-b"))
			os.Symlink(e.secret, filepath.Join(e.workspace, "token"))
			checks := map[string]string{
				"read B":              "cat " + filepath.Join(e.other, "notes.txt"),
				"list B":              "ls " + e.other,
				"read the token":      "cat " + e.secret,
				"token via a symlink": "cat token",
				"B via a symlink":     "cat link-to-b/notes.txt",
				"write B":             "echo x > " + filepath.Join(e.other, "new"),
				"write via a symlink": "echo x > link-to-b/new",
				"write the root":      "echo x > " + filepath.Join(e.root, "new"),
				"write /usr":          "echo x > /usr/talkide-test",
				"the test's binary":   "cat /proc/" + strconv.Itoa(os.Getpid()) + "/environ",
				"worker environ":      "cat /proc/" + strconv.Itoa(os.Getppid()) + "/environ",
				// What /etc holds beside what a userland reads: readable
				// to a worker running as root, as the tests do.
				"/etc/shadow":      "head -c 1 /etc/shadow",
				"/etc/gshadow":     "head -c 1 /etc/gshadow",
				"TLS private keys": "ls /etc/ssl/private",
				"list /etc":        "ls /etc",
			}
			if strings.HasPrefix(name, "namespaces") {
				// There, the parents of the workspace are directories of a
				// private tmpfs that vanishes with the call: a write lands
				// nowhere on the host (checked below).
				delete(checks, "write the root")
			}
			for what, cmd := range checks {
				out, o, err := run(t, s, e, cmd)
				if err == nil || o.ExitCode == 0 {
					t.Errorf("%s: %q succeeded: %s", what, cmd, out)
				}
			}
			if strings.HasPrefix(name, "namespaces") {
				// B is not even listed.
				out, _, err := run(t, s, e, "ls "+filepath.Dir(e.workspace))
				if err != nil || strings.TrimSpace(out) != "conv-a" {
					t.Errorf("the workspaces directory shows %q (%v), want only conv-a", out, err)
				}
			}
			if _, err := os.Stat(filepath.Join(e.other, "new")); err == nil {
				t.Error("a file appeared in B's workspace")
			}
			if _, err := os.Stat(filepath.Join(e.root, "new")); err == nil {
				t.Error("a file appeared outside the workspace")
			}
		})
	}
}

// TestSignalsStayInside: the command cannot signal the worker.
func TestSignalsStayInside(t *testing.T) {
	for name, s := range modes(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			out, _, err := run(t, s, e, fmt.Sprintf("kill -0 %d", os.Getpid()))
			if err == nil {
				t.Fatalf("kill -0 of the worker succeeded: %s", out)
			}
			if strings.HasPrefix(name, "landlock") && !strings.Contains(out, "not permitted") {
				t.Errorf("kill said %q, want EPERM", out)
			}
		})
	}
}

func TestNetwork(t *testing.T) {
	// A loopback service the command must not reach (the dev browser
	// API, the worker's command API, …), and a proxy it may.
	forbidden, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer forbidden.Close()
	go acceptAndGreet(forbidden, "forbidden\n")
	proxy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	go acceptAndGreet(proxy, "proxy\n")
	sockPath := filepath.Join(t.TempDir(), "proxy.sock")
	unixProxy, err := net.Listen("unix", sockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer unixProxy.Close()
	go acceptAndGreet(unixProxy, "proxy\n")
	proxyPort := proxy.Addr().(*net.TCPAddr).Port
	forbiddenPort := forbidden.Addr().(*net.TCPAddr).Port

	for name, s := range modes(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			allow := func(p *sandbox.Policy) {
				p.Ports = []int{proxyPort}
				p.Sockets = map[int]string{proxyPort: sockPath}
			}
			out, _, err := run(t, s, e, fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && head -1 <&3", proxyPort), allow)
			if err != nil || out != "proxy\n" {
				t.Errorf("the allowed proxy: %v, %q", err, out)
			}
			for what, cmd := range map[string]string{
				"another loopback port": fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && head -1 <&3", forbiddenPort),
				"udp":                   "exec 3<>/dev/udp/127.0.0.1/53 && echo sent >&3",
				"a unix socket":         "python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"" + sockPath + "\"); print(s.recv(9))'",
			} {
				out, _, err := run(t, s, e, cmd, allow)
				if err == nil {
					t.Errorf("%s: %q succeeded: %s", what, cmd, out)
				}
			}
		})
	}
}

// TestSeccompRefuses: every system call the filter closes (what Landlock
// does not: sockets other than TCP, io_uring, ptrace, process_vm_*, new
// namespaces, mounts, keyrings, userfaultfd) fails with EPERM in both
// layers, clone3 with ENOSYS, and a call of the x32 ABI kills the
// process. Run bare, the same calls get past the permission check
// (they work, or fail for another reason), so it is the sandbox that
// refuses them.
func TestSeccompRefuses(t *testing.T) {
	script, err := os.ReadFile("testdata/syscalls.py")
	if err != nil {
		t.Fatal(err)
	}
	bare, err := sandbox.New(&sandbox.Options{Mode: sandbox.ModeNone})
	if err != nil {
		t.Fatal(err)
	}
	all := modes(t)
	all["bare"] = bare
	for name, s := range all {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			os.WriteFile(filepath.Join(e.workspace, "syscalls.py"), script, 0o644)
			out, o, _ := run(t, s, e, "python3 syscalls.py")
			got := map[string]int{}
			for line := range strings.Lines(out) {
				i := strings.LastIndexByte(line, ' ')
				if n, err := strconv.Atoi(strings.TrimSpace(line[i+1:])); i > 0 && err == nil {
					got[line[:i]] = n
				}
			}
			if len(got) < 36 {
				t.Fatalf("the script did not run through: %d calls (exit %d, signal %v):\n%s", len(got), o.ExitCode, o.Signal, out)
			}
			for call, errno := range got {
				want := int(syscall.EPERM)
				switch {
				case call == "clone3":
					want = int(syscall.ENOSYS)
				case strings.HasPrefix(call, "ok "):
					want = 0
				case strings.HasPrefix(call, "ipc ") && strings.HasPrefix(name, "namespaces"):
					// The filter lets them through; a message queue is then
					// refused by Landlock (EACCES), as its file system is
					// none of the allowed paths.
					if errno == int(syscall.EPERM) {
						t.Errorf("%s: EPERM in the IPC namespace of the command's own", call)
					}
					continue
				}
				switch {
				case want == 0 && errno != 0:
					t.Errorf("%s: errno %d, want it allowed", call, errno)
				case want == 0:
				case name == "bare" && errno == int(syscall.EPERM) && !wantNamespaces():
					// A restricted container (the worker's pod) refuses it
					// itself: the control cannot be made here.
					t.Logf("%s: EPERM without the sandbox: this environment refuses it itself", call)
				case name == "bare" && errno == int(syscall.EPERM):
					t.Errorf("%s: EPERM without a sandbox too: the test proves nothing", call)
				case name != "bare" && call == "x32":
					t.Errorf("x32: the process survived (errno %d)", errno)
				case name != "bare" && errno != want:
					t.Errorf("%s: errno %d, want %d", call, errno, want)
				}
			}
			if _, ok := got["x32"]; name != "bare" && (ok || o.Signal != syscall.SIGSYS && o.ExitCode != 128+int(syscall.SIGSYS)) {
				t.Errorf("a system call of the x32 ABI did not kill the process: exit %d, signal %v", o.ExitCode, o.Signal)
			}
		})
	}
}

func acceptAndGreet(ln net.Listener, greeting string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Write([]byte(greeting))
		c.Close()
	}
}

// TestNothingOutlivesTheCall: a process that left the session and the
// process group is gone when the command returns.
func TestNothingOutlivesTheCall(t *testing.T) {
	for name, s := range modes(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			marker := strconv.Itoa(600 + os.Getpid()%300)
			out, o, err := run(t, s, e, "setsid sleep "+marker+" & (sleep "+marker+" &) ; echo started")
			if err != nil || o.Ending != sandbox.EndExited || out != "started\n" {
				t.Fatalf("%+v %v %q", o, err, out)
			}
			if pids := processesRunning("sleep\x00" + marker + "\x00"); len(pids) > 0 {
				t.Fatalf("background sleeps outlived the call: %v", pids)
			}
		})
	}
}

// processesRunning returns the pids whose command line is cmdline.
func processesRunning(cmdline string) []int {
	return proctest.Pids(func(pid int) bool { return proctest.Cmdline(pid) == cmdline })
}

func TestResourceLimits(t *testing.T) {
	for name, s := range modes(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			t.Run("fork bomb", func(t *testing.T) {
				out, o, err := run(t, s, e, `b(){ b | b & }; b; sleep 20`, func(p *sandbox.Policy) { p.Limits.MaxProcs = 64 })
				if err == nil || o.Ending != sandbox.EndProcs {
					t.Fatalf("outcome %+v, %v; output %.300s", o, err, out)
				}
			})
			t.Run("memory", func(t *testing.T) {
				out, o, err := run(t, s, e, `python3 -c 'b = bytearray(4 << 30); print("allocated")'; echo "python: $?"`)
				if strings.Contains(out, "allocated") || !strings.Contains(out, "python: 1") && o.Ending != sandbox.EndMemory {
					t.Fatalf("a 4 GiB allocation was not bounded: %+v, %v; output %q", o, err, out)
				}
			})
			t.Run("file size", func(t *testing.T) {
				out, _, err := run(t, s, e, `head -c 10G /dev/zero > big; echo "head: $?"`, func(p *sandbox.Policy) { p.Limits.MaxFileSize = 8 << 20 })
				fi, serr := os.Stat(filepath.Join(e.workspace, "big"))
				if err != nil || strings.Contains(out, "head: 0") || serr != nil || fi.Size() > 8<<20 {
					t.Fatalf("a 10 GB file was not bounded: %v; output %q; %v", err, out, fi)
				}
			})
			t.Run("time", func(t *testing.T) {
				_, o, err := run(t, s, e, `sleep 30`, func(p *sandbox.Policy) { p.Timeout = 200 * time.Millisecond })
				if err == nil || o.Ending != sandbox.EndTimeout {
					t.Fatalf("outcome %+v, %v", o, err)
				}
			})
		})
	}
}

func TestStop(t *testing.T) {
	for name, s := range modes(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			c, err := s.Command(sandbox.Policy{Path: "/bin/sleep", Args: []string{"30"}, Workspace: e.workspace})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan sandbox.Outcome, 1)
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			go func() {
				o, _ := c.Wait()
				done <- o
			}()
			context.AfterFunc(ctx, c.Stop)
			cancel()
			select {
			case o := <-done:
				if o.Ending != sandbox.EndStopped {
					t.Errorf("ending %s, want stopped", o.Ending)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Stop did not end the command")
			}
		})
	}
}

// TestFailsClosed: without Landlock the sandbox refuses to run commands,
// and says why.
func TestFailsClosed(t *testing.T) {
	s, err := sandbox.New(&sandbox.Options{PretendNoLandlock: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Layers()) != 0 {
		t.Errorf("layers %v without Landlock", s.Layers())
	}
	e := newEnv(t)
	_, err = s.Command(sandbox.Policy{Path: "/bin/true", Workspace: e.workspace})
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "Landlock") {
		t.Fatalf("Command = %v, want ErrUnavailable naming Landlock", err)
	}
}

// TestSetupFailureIsReported: a policy the helper cannot apply fails Start
// with the reason; the command does not run.
func TestSetupFailureIsReported(t *testing.T) {
	for name, s := range modes(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			marker := filepath.Join(e.workspace, "ran")
			c, err := s.Command(sandbox.Policy{Path: "/bin/touch", Args: []string{marker}, Workspace: e.workspace,
				Dir: filepath.Join(e.root, "no-such-dir")})
			if err != nil {
				t.Fatal(err)
			}
			err = c.Start()
			if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "no-such-dir") {
				t.Fatalf("Start = %v, want the reason", err)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("the command ran")
			}
		})
	}
}

// TestExecCommand: a caller that drives the exec.Cmd itself (an MCP
// client) gets the same confinement, and a failure to set up on stderr.
func TestExecCommand(t *testing.T) {
	for name, s := range modes(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			c, err := s.ExecCommand(context.Background(), sandbox.Policy{Path: "/bin/sh", Args: []string{"-c", "read line; echo got $line; cat " + e.secret}, Workspace: e.workspace})
			if err != nil {
				t.Fatal(err)
			}
			in, _ := c.Cmd.StdinPipe()
			var out bytes.Buffer
			c.Cmd.Stdout, c.Cmd.Stderr = &out, &out
			if err := c.Cmd.Start(); err != nil {
				t.Fatal(err)
			}
			in.Write([]byte("ping\n"))
			in.Close()
			werr := c.Cmd.Wait()
			o := c.Outcome(werr)
			c.Release()
			if !strings.HasPrefix(out.String(), "got ping\n") || o.ExitCode == 0 {
				t.Errorf("output %q, outcome %+v: want the line echoed and the secret refused", out.String(), o)
			}

			bad, err := s.ExecCommand(context.Background(), sandbox.Policy{Path: "/bin/true", Workspace: e.workspace, Dir: filepath.Join(e.root, "missing")})
			if err != nil {
				t.Fatal(err)
			}
			var errOut bytes.Buffer
			bad.Cmd.Stderr = &errOut
			if err := bad.Cmd.Run(); err == nil || !strings.Contains(errOut.String(), "missing") {
				t.Errorf("a failed setup: %v, stderr %q", err, errOut.String())
			}
			bad.Release()
		})
	}
}

// A helper built apart must be built from the same helper code: one that
// answers another fingerprint (a stale binary), or none, is refused by
// New, and no command is started with it.
func TestHelperMustMatch(t *testing.T) {
	if err := sandbox.CheckHelper(smallHelper(t)); err != nil {
		t.Fatalf("talkide-sandbox built from this tree: %v", err)
	}
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale")
	os.WriteFile(stale, []byte("#!/bin/sh\necho 0123456789abcdef\n"), 0o755)
	broken := filepath.Join(dir, "broken")
	os.WriteFile(broken, []byte("#!/bin/sh\nexit 3\n"), 0o755)
	for _, helper := range []string{stale, broken, filepath.Join(dir, "missing")} {
		for _, mode := range []sandbox.Mode{sandbox.ModeAuto, sandbox.ModeLandlock} {
			s, err := sandbox.New(&sandbox.Options{Mode: mode, Helper: helper})
			if err == nil {
				s.Close()
				t.Fatalf("New(%s, %s) accepted it", mode, filepath.Base(helper))
			}
			if helper == stale && !errors.Is(err, sandbox.ErrHelperMismatch) {
				t.Errorf("stale helper: %v, want ErrHelperMismatch", err)
			}
		}
	}
	// Mode none starts no helper, so it needs none.
	s, err := sandbox.New(&sandbox.Options{Mode: sandbox.ModeNone, Helper: stale})
	if err != nil {
		t.Fatalf("mode none: %v", err)
	}
	s.Close()
}

// TestSupervisorKilled: when the supervisor itself is killed, a process of
// the tree that holds the command's output does not keep Wait from
// returning, and nothing of the tree is left, however it left the
// session: a pids cgroup, a PID namespace or, where neither exists (an
// unprivileged worker in a restricted pod), the call's marker finds it.
func TestSupervisorKilled(t *testing.T) {
	for name, s := range everyMode(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			c, err := s.Command(sandbox.Policy{
				Path: "/bin/bash", Args: []string{"-c", "setsid sleep 61.5 & (sleep 61.5 &); echo started; wait"},
				Env: []string{"PATH=/usr/bin:/bin"}, Workspace: e.workspace, Timeout: time.Minute,
			})
			if err != nil {
				t.Fatal(err)
			}
			pr, pw := io.Pipe()
			c.Stdout = pw
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				c.Stop()
				c.Wait()
			})
			if line, err := bufio.NewReader(pr).ReadString('\n'); err != nil || line != "started\n" {
				t.Fatalf("first line %q, %v", line, err)
			}
			go io.Copy(io.Discard, pr)
			// The shell may echo before its background children have
			// become sleep.
			var sleeps []int
			for deadline := time.Now().Add(10 * time.Second); len(sleeps) != 2; sleeps = processesRunning("sleep\x0061.5\x00") {
				if time.Now().After(deadline) {
					t.Fatalf("the background sleeps: %v", sleeps)
				}
				time.Sleep(5 * time.Millisecond)
			}
			t.Cleanup(func() {
				for _, pid := range sleeps {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", sleeps[0]))
			if strings.HasSuffix(name, "-nocgroup") && strings.Contains(string(cg), "talkide-sandbox-") {
				t.Fatalf("a sleep in a pids cgroup: %s", cg)
			}
			c.Process.Kill()
			waited := make(chan sandbox.Outcome, 1)
			go func() {
				o, _ := c.Wait()
				waited <- o
			}()
			select {
			case o := <-waited:
				if o.Ending == sandbox.EndExited {
					t.Errorf("outcome %+v after the supervisor was killed", o)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Wait did not return: the background sleep holds the output")
			}
			pw.Close()
			for deadline := time.Now().Add(10 * time.Second); len(processesRunning("sleep\x0061.5\x00")) > 0; {
				if time.Now().After(deadline) {
					t.Fatal("the background sleeps outlived their supervisor and Wait")
				}
				time.Sleep(10 * time.Millisecond)
			}
			// They came back to this process (a subreaper, as the worker
			// is) and were reaped: no zombie holds a slot of the user's
			// process count.
			for _, pid := range sleeps {
				if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
					t.Errorf("the killed sleep %d is still there: %s", pid, st)
				}
			}
		})
	}
}

// noCgroupModes are the first layer as an unprivileged worker gets it,
// with no pids cgroup even where the tests run as root: with a helper
// started for each command and, "-small", one started ahead.
func noCgroupModes(t *testing.T) map[string]*sandbox.Sandbox {
	t.Helper()
	out := map[string]*sandbox.Sandbox{}
	for name, helper := range map[string]string{"landlock-nocgroup": "", "landlock-small-nocgroup": smallHelper(t)} {
		s, err := sandbox.New(&sandbox.Options{Mode: sandbox.ModeLandlock, Helper: helper, Cold: helper == "", PretendNoCgroups: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		out[name] = s
		warmModes.Store(s, helper != "")
	}
	return out
}

// everyMode is modes and noCgroupModes together.
func everyMode(t *testing.T) map[string]*sandbox.Sandbox {
	t.Helper()
	all := modes(t)
	maps.Copy(all, noCgroupModes(t))
	return all
}

// TestInheritedDescriptorsStayOut: a descriptor the worker inherited
// without close-on-exec (talkide dev 9<file) reaches no command, whether
// its helper was started for it or ahead of it, and the command starts
// with stdin, stdout and stderr alone.
func TestInheritedDescriptorsStayOut(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("inherited secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(secret, syscall.O_RDONLY, 0) // no O_CLOEXEC, as a shell leaves it
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	// Sandboxes made now, so that every helper they start inherits it.
	for name, s := range everyMode(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			out, _, _ := run(t, s, e, fmt.Sprintf("cat <&%d; ls /proc/self/fd | tr '\\n' ' '", fd))
			if strings.Contains(out, "inherited secret") {
				t.Errorf("the command read the worker's descriptor %d: %q", fd, out)
			}
			if !strings.HasSuffix(out, "0 1 2 3 ") { // 3: ls's own listing
				t.Errorf("the command's descriptors: %q, want 0 1 2 (and ls's 3)", out)
			}
		})
	}
}
