package tools

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/outpipe"
	"github.com/talkide/platform/internal/proctest"
)

func TestBash(t *testing.T) {
	ws := newWorkspace(t)
	writeFiles(t, ws.Root(), map[string]string{"hello.txt": "hi there\n"})
	tests := map[string]struct {
		in      map[string]any
		want    string // exact output, unless contains is set
		has     []string
		isError bool
	}{
		"stdout":           {in: map[string]any{"command": "echo hello"}, want: "hello\n"},
		"stderr":           {in: map[string]any{"command": "echo oops >&2"}, want: "oops\n"},
		"interleaved":      {in: map[string]any{"command": "echo 1; echo 2 >&2; echo 3"}, want: "1\n2\n3\n"},
		"cwd is the root":  {in: map[string]any{"command": "cat hello.txt"}, want: "hi there\n"},
		"no output":        {in: map[string]any{"command": "true"}, want: "(no output)"},
		"exit status":      {in: map[string]any{"command": "echo failing; exit 3"}, want: "failing\nexit status 3", isError: true},
		"exit no output":   {in: map[string]any{"command": "false"}, want: "exit status 1", isError: true},
		"no newline":       {in: map[string]any{"command": "printf x; exit 2"}, want: "x\nexit status 2", isError: true},
		"signal":           {in: map[string]any{"command": "kill -KILL $$"}, has: []string{"terminated by signal killed"}, isError: true},
		"stdin is empty":   {in: map[string]any{"command": "cat; echo done"}, want: "done\n"},
		"description":      {in: map[string]any{"command": "echo ok", "description": "Print ok"}, want: "ok\n"},
		"explicit timeout": {in: map[string]any{"command": "echo ok", "timeout": 5000}, want: "ok\n"},
		"timeout too big":  {in: map[string]any{"command": "echo ok", "timeout": 600001}, has: []string{`"timeout" must be at most 600000`}, isError: true},
		"negative timeout": {in: map[string]any{"command": "echo ok", "timeout": -1}, has: []string{`"timeout" must not be negative`}, isError: true},
		"syntax error":     {in: map[string]any{"command": "if then"}, has: []string{"syntax error", "exit status 2"}, isError: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res := run(t, &Bash{}, ws, tt.in)
			if res.IsError != tt.isError {
				t.Errorf("IsError = %v, want %v (output %q)", res.IsError, tt.isError, res.Output)
			}
			if tt.has == nil && res.Output != tt.want {
				t.Errorf("output = %q, want %q", res.Output, tt.want)
			}
			for _, s := range tt.has {
				if !strings.Contains(res.Output, s) {
					t.Errorf("output %q does not contain %q", res.Output, s)
				}
			}
		})
	}
}

func TestBashStreamsOutput(t *testing.T) {
	ws := newWorkspace(t)
	// The command cannot finish before the callback has seen "first" and
	// created the file it waits for: output is streamed, not delivered at
	// the end.
	gate := filepath.Join(ws.Root(), "gate")
	var mu sync.Mutex
	var chunks []string
	call := Call{
		Input:     input(t, map[string]any{"command": `echo first; while [ ! -e gate ]; do sleep 0.01; done; echo second`, "timeout": 20000}),
		Workspace: ws, Jail: testJail(t, ws),
		Output: func(chunk string) {
			mu.Lock()
			defer mu.Unlock()
			chunks = append(chunks, chunk)
			if strings.Contains(strings.Join(chunks, ""), "first") {
				os.WriteFile(gate, nil, 0o644)
			}
		},
	}
	res, err := (&Bash{}).Run(context.Background(), call)
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || res.Output != "first\nsecond\n" {
		t.Fatalf("result = %+v", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(chunks, ""); got != res.Output {
		t.Errorf("streamed %q, result %q", got, res.Output)
	}
}

// running reports whether a process with exactly the command line args
// runs on the host (a zombie waiting to be reaped counts as gone). The
// sandboxed processes' own pids mean nothing outside their PID namespace,
// so a test names them by a command line no other process has.
func running(args ...string) bool {
	want := proctest.Args(args...)
	return len(proctest.Pids(func(pid int) bool { return proctest.Cmdline(pid) == want && proctest.Runs(pid) })) > 0
}

// waitGoneCmd waits, with a deadline, until no process with the command
// line args runs.
func waitGoneCmd(t *testing.T, args ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for running(args...) {
		if time.Now().After(deadline) {
			t.Fatalf("%q still running", args)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
	}
}

func TestBashTimeoutKillsProcessGroup(t *testing.T) {
	ws := newWorkspace(t)
	started := time.Now()
	res := run(t, &Bash{}, ws, map[string]any{
		"command": "echo before; sleep 30.1001 & sleep 30",
		"timeout": 500,
	})
	if elapsed := time.Since(started); elapsed > 5*time.Second {
		t.Errorf("returned after %v", elapsed)
	}
	if !res.IsError || !strings.Contains(res.Output, "timed out after 500ms") || !strings.HasPrefix(res.Output, "before\n") {
		t.Errorf("result = %+v", res)
	}
	waitGoneCmd(t, "sleep", "30.1001")
}

func TestBashDefaultTimeout(t *testing.T) {
	ws := newWorkspace(t)
	res := run(t, &Bash{Timeout: 300 * time.Millisecond}, ws, map[string]any{"command": "sleep 30"})
	if !res.IsError || !strings.Contains(res.Output, "timed out after 300ms") {
		t.Errorf("result = %+v", res)
	}
}

func TestBashTermIgnored(t *testing.T) {
	ws := newWorkspace(t)
	// A process that ignores SIGTERM gets SIGKILL after the grace period.
	started := time.Now()
	res := run(t, &Bash{}, ws, map[string]any{
		"command": `trap "" TERM; exec -a talkide-term-ignored bash -c 'trap "" TERM; while :; do sleep 0.05; done'`,
		"timeout": 300,
	})
	if elapsed := time.Since(started); elapsed > 300*time.Millisecond+killGrace+3*time.Second {
		t.Errorf("returned after %v", elapsed)
	}
	if !res.IsError || !strings.Contains(res.Output, "timed out") {
		t.Errorf("result = %+v", res)
	}
	waitGoneCmd(t, "talkide-term-ignored")
}

func TestBashContextCancel(t *testing.T) {
	ws := newWorkspace(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := time.Now()
	res, err := (&Bash{}).Run(ctx, Call{
		Input:     input(t, map[string]any{"command": "sleep 30.1002 & echo started; sleep 30"}),
		Workspace: ws, Jail: testJail(t, ws),
		Output: func(chunk string) {
			if strings.Contains(chunk, "started") {
				cancel()
			}
		},
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if elapsed := time.Since(started); elapsed > 5*time.Second {
		t.Errorf("returned after %v", elapsed)
	}
	if !strings.Contains(res.Output, "started") {
		t.Errorf("partial output lost: %q", res.Output)
	}
	waitGoneCmd(t, "sleep", "30.1002")
}

// TestBashSlowReaderKeepsTheOutput: when the reader is still behind the
// command after it ended (its stream slow, a loaded machine) and the
// pipe's grace has passed, what the pipe holds is still read: the output
// is whole, streamed and returned.
func TestBashSlowReaderKeepsTheOutput(t *testing.T) {
	ws := newWorkspace(t)
	var streamed strings.Builder
	res, err := (&Bash{MaxOutputBytes: 1 << 20}).Run(context.Background(), Call{
		Input:     input(t, map[string]any{"command": "seq 1 40000"}),
		Workspace: ws, Jail: testJail(t, ws),
		Output: func(c string) {
			streamed.WriteString(c)
			time.Sleep(outpipe.Grace / 2) // a pipe's worth behind the command at its end
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 1; i <= 40000; i++ {
		fmt.Fprintln(&want, i)
	}
	if res.IsError || res.Output != want.String() {
		t.Errorf("result: %d bytes, error %v; want %d bytes (its end: %q)", len(res.Output), res.IsError, want.Len(), res.Output[max(0, len(res.Output)-20):])
	}
	if streamed.String() != want.String() {
		t.Errorf("streamed %d bytes, want %d", streamed.Len(), want.Len())
	}
}

// TestBashBackgroundCommandReturns: a command that leaves a process
// behind returns when bash exits, and the process is gone.
func TestBashBackgroundCommandReturns(t *testing.T) {
	tests := map[string]struct {
		prefix, sleep string
	}{
		"in the background": {"", "100.1003"},
		// setsid leaves the process group and keeps the output pipe open:
		// the sandbox's supervisor kills it all the same when bash exits.
		"escaped with setsid": {"setsid ", "30.1004"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := exec.LookPath("setsid"); tc.prefix != "" && err != nil {
				t.Skip("no setsid")
			}
			ws := newWorkspace(t)
			started := time.Now()
			res := run(t, &Bash{}, ws, map[string]any{"command": tc.prefix + "sleep " + tc.sleep + " & echo done"})
			if elapsed := time.Since(started); elapsed > 5*time.Second {
				t.Errorf("returned after %v", elapsed)
			}
			if res.IsError || res.Output != "done\n" {
				t.Errorf("result = %+v", res)
			}
			waitGoneCmd(t, "sleep", tc.sleep)
		})
	}
}

func TestBashEnv(t *testing.T) {
	t.Setenv("TOOLS_TEST_LEAK", "must-not-leak")
	ws := newWorkspace(t)

	res := run(t, &Bash{Env: []string{"FOO=bar", "PATH=/usr/bin:/bin"}}, ws, map[string]any{"command": "env"})
	if res.IsError {
		t.Fatalf("result = %+v", res)
	}
	env := strings.Split(strings.TrimSpace(res.Output), "\n")
	has := func(kv string) bool {
		for _, e := range env {
			if e == kv {
				return true
			}
		}
		return false
	}
	if !has("FOO=bar") || !has("PATH=/usr/bin:/bin") {
		t.Errorf("given variables missing: %q", env)
	}
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		switch name {
		case "FOO", "PATH", "PWD", "SHLVL", "_": // given, or set by bash itself
		case "HOME", "LANG", "TERM": // the jail's
		case "TMPDIR": // the command's own, from the sandbox
		default:
			t.Errorf("unexpected variable %q", e)
		}
	}

	res = run(t, &Bash{}, ws, map[string]any{"command": "env"})
	for _, want := range []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + ws.Root(), "LANG=C.UTF-8", "TERM=dumb"} {
		if !strings.Contains(res.Output, want+"\n") {
			t.Errorf("default env lacks %q: %q", want, res.Output)
		}
	}
	if strings.Contains(res.Output, "TOOLS_TEST_LEAK") {
		t.Errorf("the test's environment leaked: %q", res.Output)
	}
}

// headSeqTail is the output of headSeqTailCommand without its exit status.
var headSeqTail = "HEAD\n" + numbered("%d\n", 100000) + "TAIL\n"

// headSeqTailCommand prints more than any output cap: HEAD, the numbers
// 1 to 100000 and TAIL, a line each; then it fails.
const headSeqTailCommand = "echo HEAD; seq 1 100000; echo TAIL; exit 4"

func TestBashTruncatesOutput(t *testing.T) {
	ws := newWorkspace(t)
	var streamed strings.Builder
	res, err := (&Bash{MaxOutputBytes: 1000}).Run(context.Background(), Call{
		Input:     input(t, map[string]any{"command": headSeqTailCommand}),
		Workspace: ws, Jail: testJail(t, ws),
		Output: func(c string) { streamed.WriteString(c) },
	})
	if err != nil {
		t.Fatal(err)
	}
	full := headSeqTail
	if streamed.String() != full {
		t.Errorf("streamed output is not the complete output (%d bytes, want %d)", streamed.Len(), len(full))
	}
	note := fmt.Sprintf("[output truncated: %d bytes total]", len(full))
	if !res.IsError || !strings.HasPrefix(res.Output, "HEAD\n1\n2\n") || !strings.HasSuffix(res.Output, "100000\nTAIL\nexit status 4") || !strings.Contains(res.Output, note) {
		t.Errorf("output = %q", res.Output)
	}
	if len(res.Output) > 1000+len("exit status 4")+1 {
		t.Errorf("output is %d bytes", len(res.Output))
	}
}
