package servers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/poll"
	"github.com/talkide/platform/internal/sandbox/sandboxtest"
	"github.com/talkide/platform/internal/tools"
)

// echoBin is the test MCP server (testdata/echoserver), built once.
var echoBin string

func TestMain(m *testing.M) {
	// The stdio servers run in the sandbox, with this binary as the helper.
	sandboxtest.MainBuilding(m, "./testdata/echoserver", "echoserver", func(bin string) { echoBin = bin })
}

// fixture is a source with one conversation's workspace.
type fixture struct {
	t    *testing.T
	src  *Source
	ws   string
	turn *harness.Turn
}

// newFixture returns a source whose allow-list allows the echo server
// binary with any arguments and the variable GREETING. Close is the test's
// to call, or done at cleanup.
func newFixture(t *testing.T, opts *Options) *fixture {
	t.Helper()
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.AllowList == nil {
		o.AllowList = mustAllowList(t, fmt.Sprintf(`{"stdio": [{"command": %q, "env": ["GREETING"]}]}`, echoBin))
	}
	if o.CloseGrace == 0 {
		o.CloseGrace = 500 * time.Millisecond
	}
	src := New(&o)
	t.Cleanup(func() { src.Close() })
	ws := filepath.Join(t.TempDir(), "ws")
	os.MkdirAll(ws, 0o755)
	ws, _ = filepath.EvalSymlinks(ws)
	return &fixture{t: t, src: src, ws: ws, turn: &harness.Turn{ConversationID: "conv-1", TurnID: "turn-1", Workspace: ws, Jail: sandboxtest.HostJail(t, ws)}}
}

func mustAllowList(t *testing.T, s string) *AllowList {
	t.Helper()
	a, err := ParseAllowList([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// declare writes .mcp.json.
func (f *fixture) declare(servers map[string]any) {
	f.t.Helper()
	b, _ := json.Marshal(map[string]any{"mcpServers": servers})
	if err := os.WriteFile(filepath.Join(f.ws, ConfigFile), b, 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func echo(args ...string) map[string]any {
	return map[string]any{"command": echoBin, "args": args}
}

// tools runs Tools and returns the tools by name and the error.
func (f *fixture) tools() (map[string]tools.Tool, error) {
	f.t.Helper()
	ts, err := f.src.Tools(context.Background(), f.turn)
	m := map[string]tools.Tool{}
	for _, t := range ts {
		m[t.Name()] = t
	}
	return m, err
}

// echoTools declares the echo server alone and returns its tools, failing
// the test when they cannot be had.
func (f *fixture) echoTools() map[string]tools.Tool {
	f.t.Helper()
	f.declare(map[string]any{"echo": echo()})
	ts, err := f.tools()
	if err != nil {
		f.t.Fatal(err)
	}
	return ts
}

// call runs a tool and fails the test on a Go error.
func (f *fixture) call(ts map[string]tools.Tool, name, input string) tools.Result {
	f.t.Helper()
	tool := ts[name]
	if tool == nil {
		f.t.Fatalf("no tool %s", name)
	}
	ws, _ := tools.NewWorkspace(f.ws)
	res, err := tool.Run(context.Background(), tools.Call{ID: "toolu_1", Input: json.RawMessage(input), Workspace: ws})
	if err != nil {
		f.t.Fatalf("%s: %v", name, err)
	}
	return res
}

// pids returns the echo server's pid and its child's (0 without -child).
func (f *fixture) pids(ts map[string]tools.Tool, name string) (int, int) {
	f.t.Helper()
	res := f.call(ts, name, `{}`)
	var a, b int
	if _, err := fmt.Sscanf(res.Output, "%d %d", &a, &b); err != nil {
		f.t.Fatalf("%s = %+v", name, res)
	}
	return a, b
}

// alive reports whether pid is a process that is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil && runtime.GOOS != "linux"
	}
	i := bytes.LastIndexByte(stat, ')')
	f := strings.Fields(string(stat[i+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

func TestStdioServerToolCall(t *testing.T) {
	t.Setenv("TALKIDE_TEST_CANARY", "worker-secret")
	f := newFixture(t, nil)
	f.declare(map[string]any{"echo": map[string]any{"command": echoBin, "env": map[string]string{"GREETING": "hello"}}})
	ts, err := f.tools()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"mcp__echo__echo", "mcp__echo__env", "mcp__echo__fail", "mcp__echo__pid"} {
		if ts[name] == nil {
			t.Fatalf("no %s among %v", name, ts)
		}
	}
	e := ts["mcp__echo__echo"]
	if e.Description() != "Echoes its text." {
		t.Errorf("description %q", e.Description())
	}
	if s := e.InputSchema(); s["type"] != "object" || s["properties"].(map[string]any)["text"] == nil {
		t.Errorf("schema %v", s)
	}
	if res := f.call(ts, "mcp__echo__echo", `{"text":"hi"}`); res.Output != "hi" || res.IsError {
		t.Errorf("echo = %+v", res)
	}

	// Its environment is the scrubbed one of the jail plus what was
	// declared, and a TMPDIR of its own; its directory the workspace.
	res := f.call(ts, "mcp__echo__env", `{}`)
	want := "cwd=" + f.ws + "\nGREETING=hello\nHOME=" + f.ws + "\nLANG=C.UTF-8\nPATH=" + DefaultPath + "\nTERM=dumb\nTMPDIR="
	if !strings.HasPrefix(res.Output, want) || strings.Count(res.Output, "\n") != strings.Count(want, "\n") {
		t.Errorf("env:\n%s\nwant:\n%s…", res.Output, want)
	}

	// An error result is an error the model sees.
	if res := f.call(ts, "mcp__echo__fail", `{}`); !res.IsError || !strings.Contains(res.Output, "it failed, as asked") {
		t.Errorf("fail = %+v", res)
	}
	// So is input the server rejects, and input that is not an object.
	if res := f.call(ts, "mcp__echo__echo", `{"text": 5}`); !res.IsError {
		t.Errorf("bad input = %+v", res)
	}
	if res := f.call(ts, "mcp__echo__echo", `[1]`); !res.IsError || !strings.Contains(res.Output, "JSON object") {
		t.Errorf("array input = %+v", res)
	}

	// The next turn reuses the running server.
	pid, _ := f.pids(ts, "mcp__echo__pid")
	ts2, err := f.tools()
	if err != nil {
		t.Fatal(err)
	}
	if pid2, _ := f.pids(ts2, "mcp__echo__pid"); pid2 != pid {
		t.Errorf("second turn: pid %d, want %d", pid2, pid)
	}
}

func TestLargeAndNonTextOutput(t *testing.T) {
	f := newFixture(t, &Options{MaxOutputBytes: 1000})
	ts := f.echoTools()
	state := t.TempDir()
	ws, _ := tools.NewWorkspace(f.ws)
	res, err := ts["mcp__echo__big"].Run(context.Background(), tools.Call{ID: "toolu_big", Input: json.RawMessage(`{}`), Workspace: ws, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Output, "[output truncated: ") || !strings.Contains(res.Output, "kept on the session volume as tool-output/toolu_big.txt") {
		t.Errorf("output not capped as the tools' are: %q", res.Output)
	}
	if len(res.Output) > 1200 {
		t.Errorf("output %d bytes", len(res.Output))
	}
	whole, err := os.ReadFile(filepath.Join(state, tools.SpillDir, "toolu_big.txt"))
	if err != nil || !strings.HasSuffix(string(whole), "[image content: image/png, 16 bytes, not shown]") || len(whole) < 100000 {
		t.Errorf("kept output: %d bytes, %v", len(whole), err)
	}
}

func TestRefusedAndFailingServersDoNotStopTheOthers(t *testing.T) {
	f := newFixture(t, nil)
	f.declare(map[string]any{
		"good":    echo(),
		"dies":    echo("-exit-now"),
		"shell":   map[string]any{"command": "/bin/sh", "args": []string{"-c", "touch pwned"}},
		"secrets": map[string]any{"command": echoBin, "env": map[string]string{"LD_PRELOAD": "./evil.so"}},
		"web":     map[string]any{"type": "http", "url": "https://mcp.example/", "headers": map[string]string{"Authorization": "Bearer sekret"}},
		"missing": map[string]any{"command": "no-such-mcp-server"},
	})
	ts, err := f.tools()
	if ts["mcp__good__echo"] == nil {
		t.Fatalf("the good server's tools are missing: %v (%v)", ts, err)
	}
	if len(ts) != len(mustTools(t, f, "good")) {
		t.Errorf("tools of other servers offered: %v", ts)
	}
	if !errors.Is(err, ErrNotAllowed) || !errors.Is(err, ErrStartFailed) {
		t.Fatalf("err = %v", err)
	}
	msg := err.Error()
	for _, want := range []string{
		`MCP server "dies": failed to start`, "told to exit at once",
		`MCP server "shell": not on the operator's MCP allow-list`,
		`MCP server "secrets": not on the operator's MCP allow-list: rule stdio[0] allows the command but not the environment variable LD_PRELOAD`,
		`MCP server "web": not on the operator's MCP allow-list`,
		`MCP server "missing": not on the operator's MCP allow-list`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "sekret") || strings.Contains(msg, "evil.so") {
		t.Errorf("error shows a header or variable value:\n%s", msg)
	}
	if _, err := os.Stat(filepath.Join(f.ws, "pwned")); err == nil {
		t.Fatal("a refused server ran")
	}
	var se *ServerError
	if !errors.As(err, &se) {
		t.Errorf("no *ServerError in %v", err)
	}
	if res := f.call(ts, "mcp__good__echo", `{"text":"still here"}`); res.Output != "still here" {
		t.Errorf("echo = %+v", res)
	}

	// The next turn: the refusals were reported, the failed server waits
	// for its retry delay; nothing to report.
	ts, err = f.tools()
	if err != nil || ts["mcp__good__echo"] == nil {
		t.Errorf("second turn: %v, %v", ts, err)
	}
}

func mustTools(t *testing.T, f *fixture, server string) []tools.Tool {
	t.Helper()
	f.src.mu.Lock()
	c := f.src.convs[f.turn.ConversationID]
	f.src.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offered[server]
}

func TestNothingAllowedByDefault(t *testing.T) {
	src := New(nil)
	defer src.Close()
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, ConfigFile), []byte(fmt.Sprintf(`{"mcpServers": {"echo": {"command": %q}}}`, echoBin)), 0o644)
	ts, err := src.Tools(context.Background(), &harness.Turn{ConversationID: "c", Workspace: ws, Jail: sandboxtest.HostJail(t, ws)})
	if len(ts) != 0 || !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("tools %v, err %v", ts, err)
	}
	// No .mcp.json: no tools, nothing to report.
	ts, err = src.Tools(context.Background(), &harness.Turn{ConversationID: "other", Workspace: t.TempDir()})
	if len(ts) != 0 || err != nil {
		t.Fatalf("without .mcp.json: %v, %v", ts, err)
	}
}

func TestDeadServerIsRestartedNextTurn(t *testing.T) {
	f := newFixture(t, nil)
	ts := f.echoTools()
	pid, _ := f.pids(ts, "mcp__echo__pid")
	res := f.call(ts, "mcp__echo__crash", `{}`)
	if !res.IsError {
		t.Errorf("crash = %+v", res)
	}
	poll.Until(t, "the crashed server is reaped", func() bool { return !alive(pid) })
	// Until the next turn, its tools say it is not running.
	poll.Until(t, "the session notices", func() bool {
		return strings.Contains(f.call(ts, "mcp__echo__echo", `{"text":"x"}`).Output, "not running")
	})

	ts, err := f.tools()
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	pid2, _ := f.pids(ts, "mcp__echo__pid")
	if pid2 == pid || !alive(pid2) {
		t.Errorf("restarted pid %d (was %d)", pid2, pid)
	}
	if res := f.call(ts, "mcp__echo__echo", `{"text":"back"}`); res.Output != "back" {
		t.Errorf("echo after restart = %+v", res)
	}
}

func TestConfigChange(t *testing.T) {
	f := newFixture(t, nil)
	ts := f.echoTools()
	pid, _ := f.pids(ts, "mcp__echo__pid")

	// Declared differently: restarted.
	f.declare(map[string]any{"echo": echo("-child")})
	ts, err := f.tools()
	if err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Error("the old server still runs")
	}
	pid2, child := f.pids(ts, "mcp__echo__pid")
	if pid2 == pid || child == 0 {
		t.Fatalf("pids %d %d", pid2, child)
	}

	// Broken file: reported, servers stopped.
	os.WriteFile(filepath.Join(f.ws, ConfigFile), []byte(`{"mcpServers": `), 0o644)
	ts, err = f.tools()
	if len(ts) != 0 || !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("broken file: %v, %v", ts, err)
	}
	if alive(pid2) || alive(child) {
		t.Error("servers of a broken file still run")
	}
	// Reported once per version.
	if _, err := f.tools(); err != nil {
		t.Errorf("reported again: %v", err)
	}

	// Removed: nothing.
	f.declare(map[string]any{"echo": echo()})
	if ts, err = f.tools(); err != nil || len(ts) == 0 {
		t.Fatal(ts, err)
	}
	pid3, _ := f.pids(ts, "mcp__echo__pid")
	os.Remove(filepath.Join(f.ws, ConfigFile))
	if ts, err = f.tools(); err != nil || len(ts) != 0 {
		t.Fatal(ts, err)
	}
	if alive(pid3) {
		t.Error("the server of a removed file still runs")
	}
}

func TestCloseKillsProcessGroupsAndGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	f := newFixture(t, nil)
	f.declare(map[string]any{"a": echo("-child"), "b": echo()})
	ts, err := f.tools()
	if err != nil {
		t.Fatal(err)
	}
	pa, child := f.pids(ts, "mcp__a__pid")
	pb, _ := f.pids(ts, "mcp__b__pid")
	// A second conversation.
	f.turn = &harness.Turn{ConversationID: "conv-2", Workspace: f.ws, Jail: sandboxtest.HostJail(t, f.ws)}
	ts2, err := f.tools()
	if err != nil {
		t.Fatal(err)
	}
	pc, _ := f.pids(ts2, "mcp__b__pid")
	for _, p := range []int{pa, child, pb, pc} {
		if !alive(p) {
			t.Fatalf("pid %d not running", p)
		}
	}
	if err := f.src.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{pa, child, pb, pc} {
		if alive(p) {
			t.Errorf("pid %d still runs after Close", p)
		}
	}
	if _, err := f.src.Tools(context.Background(), f.turn); !errors.Is(err, ErrClosed) {
		t.Errorf("Tools after Close: %v", err)
	}
	if res := f.call(ts, "mcp__b__echo", `{"text":"x"}`); !res.IsError || !strings.Contains(res.Output, "not running") {
		t.Errorf("a call after Close = %+v", res)
	}
	poll.Until(t, "goroutines return to the baseline", func() bool { return runtime.NumGoroutine() <= before })
}

func TestIdleConversationIsClosed(t *testing.T) {
	// The janitor's own sweep never fires within the test; the test runs a
	// sweep at a time past the idle timeout, so a slow machine cannot idle
	// the server between a turn's Tools and its call.
	f := newFixture(t, &Options{IdleTimeout: time.Hour})
	ts := f.echoTools()
	pid, _ := f.pids(ts, "mcp__echo__pid")
	f.src.closeIdle(time.Now().Add(30 * time.Minute))
	if !alive(pid) {
		t.Fatal("a server idle for less than the timeout was stopped")
	}
	f.src.closeIdle(time.Now().Add(2 * time.Hour))
	poll.Until(t, "the idle server is stopped", func() bool { return !alive(pid) })
	f.src.mu.Lock()
	n := len(f.src.convs)
	f.src.mu.Unlock()
	if n != 0 {
		t.Errorf("%d conversations kept", n)
	}
	// The next turn starts it again.
	ts, err := f.tools()
	if err != nil {
		t.Fatal(err)
	}
	if res := f.call(ts, "mcp__echo__echo", `{"text":"again"}`); res.Output != "again" {
		t.Errorf("echo = %+v", res)
	}
}

func TestStartTimeout(t *testing.T) {
	// Long enough for the good server's start in its sandbox (the helper,
	// then the server, then the handshake) on a loaded machine: at 300 ms
	// it missed it now and then, under -race with other tests running.
	f := newFixture(t, &Options{StartTimeout: 2 * time.Second})
	f.declare(map[string]any{"hang": echo("-hang"), "echo": echo()})
	start := time.Now()
	ts, err := f.tools()
	if !errors.Is(err, ErrStartFailed) || !strings.Contains(err.Error(), "did not answer in time") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Tools took %v", d)
	}
	if ts["mcp__echo__echo"] == nil {
		t.Error("the other server's tools are missing")
	}
}

func TestCallTimeoutAndInterrupt(t *testing.T) {
	f := newFixture(t, &Options{CallTimeout: 200 * time.Millisecond})
	ts := f.echoTools()
	if res := f.call(ts, "mcp__echo__sleep", `{"ms": 60000}`); !res.IsError || !strings.Contains(res.Output, "did not answer within 200ms") {
		t.Errorf("slow call = %+v", res)
	}
	// An interrupted turn is a Go error, as for the built-in tools.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	ws, _ := tools.NewWorkspace(f.ws)
	if _, err := ts["mcp__echo__sleep"].Run(ctx, tools.Call{Input: json.RawMessage(`{"ms": 60000}`), Workspace: ws}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("interrupted call: err = %v", err)
	}
	// The server is still usable.
	if res := f.call(ts, "mcp__echo__echo", `{"text":"ok"}`); res.Output != "ok" {
		t.Errorf("echo = %+v", res)
	}
}

func TestHTTPServer(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "web", Version: "1"}, nil)
	type in struct {
		A int `json:"a"`
		B int `json:"b"`
	}
	type out struct {
		Sum int `json:"sum"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "add", Description: "Adds."}, func(_ context.Context, _ *mcp.CallToolRequest, x in) (*mcp.CallToolResult, out, error) {
		return nil, out{Sum: x.A + x.B}, nil
	})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer t0k" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	defer ts.Close()
	before := runtime.NumGoroutine()

	f := newFixture(t, &Options{AllowList: mustAllowList(t, fmt.Sprintf(`{"http": [{"url_prefix": %q}]}`, ts.URL+"/mcp"))})
	f.declare(map[string]any{
		"web":     map[string]any{"type": "http", "url": ts.URL + "/mcp", "headers": map[string]string{"Authorization": "Bearer t0k"}},
		"nokey":   map[string]any{"type": "http", "url": ts.URL + "/mcp/v2"},
		"outside": map[string]any{"type": "http", "url": ts.URL + "/admin"},
	})
	tools, err := f.tools()
	if tools["mcp__web__add"] == nil {
		t.Fatalf("tools %v, err %v", tools, err)
	}
	msg := fmt.Sprint(err)
	if !strings.Contains(msg, `MCP server "nokey": failed to start`) || !strings.Contains(msg, `MCP server "outside": not on the operator's MCP allow-list`) {
		t.Errorf("err = %v", err)
	}
	if res := f.call(tools, "mcp__web__add", `{"a": 2, "b": 3}`); res.IsError || !strings.Contains(res.Output, `"sum":5`) {
		t.Errorf("add = %+v", res)
	}
	// A server that announces a new tool list has it offered on a later turn.
	mcp.AddTool(srv, &mcp.Tool{Name: "neg", Description: "Negates."}, func(_ context.Context, _ *mcp.CallToolRequest, x in) (*mcp.CallToolResult, out, error) {
		return nil, out{Sum: -x.A}, nil
	})
	poll.Until(t, "the new tool is offered", func() bool {
		tools, _ = f.tools()
		return tools["mcp__web__neg"] != nil
	})
	if res := f.call(tools, "mcp__web__neg", `{"a": 2, "b": 0}`); !strings.Contains(res.Output, `"sum":-2`) {
		t.Errorf("neg = %+v", res)
	}
	if err := f.src.Close(); err != nil {
		t.Fatal(err)
	}
	ts.CloseClientConnections()
	poll.Until(t, "goroutines return to the baseline", func() bool { return runtime.NumGoroutine() <= before })
}

// A start cut short by an interrupted turn is not the server's failure: the
// next turn starts it without waiting for a retry delay.
func TestInterruptedStartIsRetriedAtOnce(t *testing.T) {
	f := newFixture(t, nil)
	f.declare(map[string]any{"echo": echo()})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ts, _ := f.src.Tools(ctx, f.turn); len(ts) != 0 {
		t.Fatalf("tools from an interrupted start: %v", ts)
	}
	ts, err := f.tools()
	if err != nil || ts["mcp__echo__echo"] == nil {
		t.Fatalf("next turn: %v, %v", ts, err)
	}
}
