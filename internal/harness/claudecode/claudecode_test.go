package claudecode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/sandbox/sandboxtest"
)

// fakeBin is the fake CLI built from testdata/fakeclaude.
var fakeBin, fakeRoot string

func TestMain(m *testing.M) {
	// The CLI runs in the sandbox, with this binary as the helper.
	sandboxtest.MainBuilding(m, "./testdata/fakeclaude", "claude", func(bin string) {
		fakeBin = bin
		// The fake records its starts under fakeRoot, which the sessions'
		// sandboxes may write, and replays transcripts they may read.
		fakeRoot = filepath.Join(filepath.Dir(bin), "runs")
		os.Mkdir(fakeRoot, 0o755)
	})
}

// fake is a harness over the fake CLI, with the directory where the fake
// records its starts.
type fake struct {
	h   *Harness
	dir string
}

func newFake(t *testing.T, opts func(*Options)) *fake {
	t.Helper()
	runDir, err := os.MkdirTemp(fakeRoot, "run")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(runDir) })
	f := &fake{dir: runDir}
	transcripts, _ := filepath.Abs(transcriptDir)
	o := Options{
		ExtraEnv: []string{"FAKECLAUDE_DIR=" + f.dir, "FAKECLAUDE_TRANSCRIPTS=" + transcripts},
	}
	if opts != nil {
		opts(&o)
	}
	h, err := New(fakeBin, Proxy{
		BaseURLFor: func(conv string) string { return "http://127.0.0.1:9/" + conv },
		Capability: func(conv string) string { return "tlp_cap-" + conv },
	}, &o)
	if err != nil {
		t.Fatal(err)
	}
	f.h = h
	t.Cleanup(func() { f.h.Close() })
	return f
}

type start struct {
	Args []string `json:"args"`
	Env  []string `json:"env"`
	Cwd  string   `json:"cwd"`
	Pid  int      `json:"pid"`
}

// starts reads the fake's start records.
func (f *fake) starts(t *testing.T) []start {
	t.Helper()
	var out []start
	for n := 1; ; n++ {
		b, err := os.ReadFile(filepath.Join(f.dir, fmt.Sprintf("start-%d.json", n)))
		if errors.Is(err, os.ErrNotExist) {
			return out
		}
		var s start
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
}

func argAfter(args []string, flag string) string {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return ""
	}
	return args[i+1]
}

// alive reports whether pid is a live process (not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || !strings.HasPrefix(string(b[i+1:]), " Z")
}

func TestReplayedTurnsMapOntoEvents(t *testing.T) {
	f := newFake(t, nil)
	s := newSession(t, "c1")
	res := mustTurn(t, f.h, s, "replay:tool")
	if res.StopReason != "end_turn" || res.ModelCalls != 2 {
		t.Errorf("result %+v, want end_turn after 2 model calls", res)
	}
	evs, reps := s.take()
	want := []string{
		contract.KindMessage, contract.KindUsage, contract.KindToolStarted, contract.KindToolFinished,
		contract.KindMessage, contract.KindUsage,
	}
	if diff := cmp.Diff(want, eventKinds(evs)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if got := lastText(evs); got != "[simulator] tool results: 1) hello-from-bash" {
		t.Errorf("final text %q", got)
	}
	var kinds []string
	for _, r := range reps {
		kinds = append(kinds, r.Kind)
	}
	if diff := cmp.Diff([]string{contract.ReportUsage, contract.ReportToolUse, contract.ReportUsage}, kinds); diff != "" {
		t.Errorf("reports (-want +got):\n%s", diff)
	}
	// The session transcript holds the user's message, then the CLI's
	// messages in the Messages API's shape.
	recs, _ := s.transcript.Records()
	var roles []string
	for _, r := range recs {
		var m struct{ Role string }
		json.Unmarshal(r, &m)
		roles = append(roles, m.Role)
	}
	if diff := cmp.Diff([]string{"user", "assistant", "user", "assistant"}, roles); diff != "" {
		t.Errorf("transcript roles (-want +got):\n%s", diff)
	}

	// An API error ends the turn as turn.failed with the status.
	_, err := runTurn(t, f.h, s, "replay:api_error")
	var te *harness.TurnError
	if !errors.As(err, &te) || te.Code != contract.FailModelError || te.HTTPStatus != 400 || te.Retryable {
		t.Errorf("api error: %v", err)
	}
	_, err = runTurn(t, f.h, s, "replay:max_turns")
	if !errors.As(err, &te) || te.Code != contract.FailMaxTurns {
		t.Errorf("max turns: %v", err)
	}
	// All of it in one process.
	if n := len(f.starts(t)); n != 1 {
		t.Errorf("the CLI was started %d times, want once", n)
	}
}

func TestCLIEnvironmentIsExact(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-worker-secret")
	t.Setenv("TALKIDE_WORKER_IDENTITY_TOKEN", "tki_secret")
	f := newFake(t, func(o *Options) { o.ExtraEnv = append(o.ExtraEnv, "LANG=C.UTF-8") })
	s := newSession(t, "conv-env")
	mustTurn(t, f.h, s, "hello")
	st := f.starts(t)
	if len(st) != 1 {
		t.Fatalf("%d starts", len(st))
	}
	transcripts, _ := filepath.Abs(transcriptDir)
	want := []string{
		"PATH=" + DefaultPath,
		"HOME=" + filepath.Join(s.dir, "claude-code", "home"),
		"CLAUDE_CONFIG_DIR=" + filepath.Join(s.dir, "claude-code", "config"),
		"ANTHROPIC_BASE_URL=http://127.0.0.1:9/conv-env",
		"ANTHROPIC_AUTH_TOKEN=tlp_cap-conv-env",
		"DISABLE_TELEMETRY=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_ERROR_REPORTING=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"CLAUDE_CODE_MAX_RETRIES=5",
		"FAKECLAUDE_DIR=" + f.dir,
		"FAKECLAUDE_TRANSCRIPTS=" + transcripts,
		"LANG=C.UTF-8",
		"TERM=dumb",                  // the jail's
		"TMPDIR=<the command's own>", // the sandbox's, a directory per command
	}
	got := slices.Clone(st[0].Env)
	for i, kv := range got {
		if strings.HasPrefix(kv, "TMPDIR=/tmp/talkide-sandbox-") {
			got[i] = "TMPDIR=<the command's own>"
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the CLI's environment (-want +got):\n%s", diff)
	}
	for _, kv := range st[0].Env {
		if strings.HasPrefix(kv, "ANTHROPIC_API_KEY=") || strings.Contains(kv, "secret") {
			t.Errorf("the CLI sees %q", kv)
		}
	}
	if st[0].Cwd != s.ws {
		t.Errorf("cwd %q, want the workspace %q", st[0].Cwd, s.ws)
	}
	wantArgs := []string{"-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
		"--include-partial-messages", "--permission-mode", "acceptEdits", "--permission-prompts", "none", "--max-turns", "100",
		"--allowedTools", strings.Join(DefaultAllowedTools, ",")}
	if diff := cmp.Diff(wantArgs, st[0].Args); diff != "" {
		t.Errorf("arguments (-want +got):\n%s", diff)
	}
}

func TestResumeAfterRestart(t *testing.T) {
	f := newFake(t, nil)
	s := newSession(t, "c-resume")
	mustTurn(t, f.h, s, "one")
	mustTurn(t, f.h, s, "two")
	evs, _ := s.take()
	first := f.starts(t)[0]
	if got, want := lastText(evs), fmt.Sprintf("fake turn 2 of session fake-%d", first.Pid); got != want {
		t.Fatalf("second turn answered %q, want %q (one process for both turns)", got, want)
	}

	// A new worker: a new harness over the same session directory.
	f.h.Close()
	if f.h.Running() != 0 {
		t.Fatalf("%d CLIs still running after Close", f.h.Running())
	}
	if alive(first.Pid) {
		t.Fatalf("the CLI (pid %d) outlived Close", first.Pid)
	}
	f2 := newFake(t, func(o *Options) { o.ExtraEnv[0] = "FAKECLAUDE_DIR=" + f.dir })
	mustTurn(t, f2.h, s, "three")
	evs, _ = s.take()
	if got, want := lastText(evs), fmt.Sprintf("fake turn 3 of session fake-%d", first.Pid); got != want {
		t.Errorf("after the restart: %q, want %q", got, want)
	}
	st := f.starts(t)
	if len(st) != 2 || argAfter(st[1].Args, "--resume") != fmt.Sprintf("fake-%d", first.Pid) {
		t.Errorf("second start's arguments %q, want --resume of the first session", st[len(st)-1].Args)
	}
}

func TestIdleProcessStopsAndResumes(t *testing.T) {
	f := newFake(t, func(o *Options) { o.IdleTimeout = 20 * time.Millisecond })
	s := newSession(t, "c-idle")
	mustTurn(t, f.h, s, "one")
	pid := f.starts(t)[0].Pid
	deadline := time.Now().Add(10 * time.Second)
	for f.h.Running() != 0 || alive(pid) {
		if time.Now().After(deadline) {
			t.Fatal("the idle CLI was not stopped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	mustTurn(t, f.h, s, "two")
	evs, _ := s.take()
	if got := lastText(evs); !strings.HasPrefix(got, "fake turn 2 ") {
		t.Errorf("after the idle stop: %q", got)
	}
	if st := f.starts(t); len(st) != 2 || argAfter(st[1].Args, "--resume") == "" {
		t.Errorf("starts %+v, want a second one with --resume", st)
	}
}

func TestInterruptKillsTheProcessTree(t *testing.T) {
	f := newFake(t, nil)
	s := newSession(t, "c-int")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{}, 1)
	s.watch = func(ev contract.Event) {
		if ev.Kind == contract.KindToolStarted {
			started <- struct{}{}
		}
	}
	errc := make(chan error, 1)
	go func() { _, err := f.h.RunTurn(ctx, s.turn("hang")); errc <- err }()
	<-started
	// The tool's process is running, in a session of its own.
	var child int
	deadline := time.Now().Add(10 * time.Second)
	for child == 0 {
		b, _ := os.ReadFile(filepath.Join(f.dir, "child.pid"))
		child, _ = strconv.Atoi(string(b))
		if time.Now().After(deadline) {
			t.Fatal("the fake never started its tool process")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("interrupted turn: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunTurn did not return after the interrupt")
	}
	cli := f.starts(t)[0].Pid
	deadline = time.Now().Add(5 * time.Second)
	for alive(cli) || alive(child) {
		if time.Now().After(deadline) {
			t.Fatalf("still running after the interrupt: cli %v, tool %v", alive(cli), alive(child))
		}
		time.Sleep(5 * time.Millisecond)
	}
	evs, _ := s.take()
	last := evs[len(evs)-1]
	if last.Kind != contract.KindToolFinished || !last.Tool.IsError || last.Tool.ID != "toolu_hang" {
		t.Errorf("last event %+v, want the open tool call finished as interrupted", last)
	}
	// The transcript has no tool_use without its tool_result.
	recs, _ := s.transcript.Records()
	if !strings.Contains(string(recs[len(recs)-1]), `"tool_use_id":"toolu_hang"`) {
		t.Errorf("last transcript record %s", recs[len(recs)-1])
	}

	// The session goes on, in a new process that resumes it.
	mustTurn(t, f.h, s, "after")
	evs, _ = s.take()
	if got := lastText(evs); !strings.HasPrefix(got, "fake turn 2 ") {
		t.Errorf("after the interrupt: %q", got)
	}
}

func TestCrashFailsTheTurnAndTheNextOneResumes(t *testing.T) {
	f := newFake(t, nil)
	s := newSession(t, "c-crash")
	_, err := runTurn(t, f.h, s, "crash")
	var te *harness.TurnError
	if !errors.As(err, &te) || te.Code != contract.FailInternal || !te.Retryable {
		t.Fatalf("crash: %v, want a retryable internal failure", err)
	}
	if strings.Contains(harness.Failure(err).Message, "tlp_") {
		t.Errorf("the failure shows a credential: %q", harness.Failure(err).Message)
	}
	if f.h.Running() != 0 {
		t.Errorf("%d processes after the crash", f.h.Running())
	}
	mustTurn(t, f.h, s, "again")
	evs, _ := s.take()
	if got := lastText(evs); !strings.HasPrefix(got, "fake turn 2 ") {
		t.Errorf("after the crash: %q, want the resumed session's second turn", got)
	}
}

func TestLostSessionStartsANewOne(t *testing.T) {
	f := newFake(t, nil)
	s := newSession(t, "c-lost")
	if err := saveState(s.dir, state{SessionID: "gone"}); err != nil {
		t.Fatal(err)
	}
	mustTurn(t, f.h, s, "hello")
	evs, _ := s.take()
	if evs[0].Kind != contract.KindNotice || lastText(evs) == "" || !strings.HasPrefix(lastText(evs), "fake turn 1 ") {
		t.Errorf("events %+v, want a notice and a reply from a new session", evs)
	}
	st, _ := loadState(s.dir)
	if st.SessionID == "gone" || st.SessionID == "" {
		t.Errorf("state %+v after the new session", st)
	}
}

func TestCloseRefusesLaterTurns(t *testing.T) {
	f := newFake(t, nil)
	s := newSession(t, "c-close")
	mustTurn(t, f.h, s, "hello")
	f.h.Close()
	_, err := runTurn(t, f.h, s, "again")
	if !errors.Is(err, ErrClosed) || harness.Failure(err).Code != contract.FailWorkerRestarted {
		t.Errorf("turn after Close: %v", err)
	}
}

func TestNewRefusesManagedEnvironment(t *testing.T) {
	proxy := Proxy{BaseURLFor: func(string) string { return "" }, Capability: func(string) string { return "" }}
	for _, kv := range []string{"ANTHROPIC_API_KEY=sk", "ANTHROPIC_BASE_URL=http://x", "HOME=/", "CLAUDE_CODE_MAX_RETRIES=99", "nonsense"} {
		if h, err := New("claude", proxy, &Options{ExtraEnv: []string{kv}}); !errors.Is(err, ErrBadOptions) || h != nil {
			t.Errorf("New with ExtraEnv %q = %v, %v; want ErrBadOptions", kv, h, err)
		}
	}
}

func TestNewArguments(t *testing.T) {
	url := func(string) string { return "http://127.0.0.1:9/x" }
	capability := func(string) string { return "tlp_x" }
	tests := map[string]struct {
		bin     string
		proxy   Proxy
		opts    *Options
		wantErr bool
	}{
		"nil options":         {bin: "claude", proxy: Proxy{url, capability}},
		"empty options":       {bin: "claude", proxy: Proxy{url, capability}, opts: &Options{}},
		"an allowed variable": {bin: "claude", proxy: Proxy{url, capability}, opts: &Options{ExtraEnv: []string{"LANG=C"}}},
		"no executable":       {proxy: Proxy{url, capability}, wantErr: true},
		"no base URL":         {bin: "claude", proxy: Proxy{Capability: capability}, wantErr: true},
		"no capability":       {bin: "claude", proxy: Proxy{BaseURLFor: url}, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h, err := New(tc.bin, tc.proxy, tc.opts)
			if tc.wantErr {
				if !errors.Is(err, ErrBadOptions) || h != nil {
					t.Fatalf("New = %v, %v; want ErrBadOptions", h, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer h.Close()
			// The defaults are filled in one place, for nil and empty
			// options alike.
			if h.opts.PermissionMode != DefaultPermissionMode || h.opts.MaxTurns != DefaultMaxTurns || h.opts.Path != DefaultPath ||
				h.opts.IdleTimeout != DefaultIdleTimeout || h.opts.MaxLineBytes != DefaultMaxLineBytes || h.opts.MaxToolOutput != DefaultMaxToolOutput ||
				h.opts.Logger == nil || h.opts.Now == nil {
				t.Errorf("defaults not filled in: %+v", h.opts)
			}
			if diff := cmp.Diff(DefaultAllowedTools, h.opts.AllowedTools); diff != "" {
				t.Errorf("AllowedTools (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadLineBoundsLines(t *testing.T) {
	r, w, _ := os.Pipe()
	go func() {
		w.WriteString("short\n" + strings.Repeat("x", 300) + "\nafter\nlast")
		w.Close()
	}()
	p := &proc{lines: make(chan []byte, 8), quit: make(chan struct{})}
	p.read(r, 100)
	var got []string
	for l := range p.lines {
		got = append(got, string(l))
	}
	if diff := cmp.Diff([]string{"short", "\x00", "after", "last"}, got); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
}

func TestKillTreeReachesOtherSessions(t *testing.T) {
	cmd := exec.Command("sh", "-c", "setsid sleep 300 & echo $!; wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var child int
	if _, err := fmt.Fscan(out, &child); err != nil {
		t.Fatal(err)
	}
	killTree(cmd.Process.Pid)
	cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for alive(child) {
		if time.Now().After(deadline) {
			syscall.Kill(child, syscall.SIGKILL)
			t.Fatal("a descendant in its own session survived killTree")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
