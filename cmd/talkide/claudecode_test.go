package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/proctest"
	"github.com/talkide/platform/internal/roles"
)

// claudeCodeBin is the real Claude Code CLI, installed by
// scripts/claude-code.sh (which scripts/test.sh runs). The tests of the
// claude-code harness need it: they fail without it rather than pass
// without having run.
func claudeCodeBin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("TALKIDE_CLAUDE_CODE_BIN")
	if bin == "" {
		t.Fatal("TALKIDE_CLAUDE_CODE_BIN is not set: run ./scripts/test.sh, which installs the pinned Claude Code CLI and sets it, " +
			"or set TALKIDE_CLAUDE_CODE_BIN=$(./scripts/claude-code.sh)")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("TALKIDE_CLAUDE_CODE_BIN: %v (run ./scripts/claude-code.sh to install the CLI)", err)
	}
	return bin
}

// startClaudeCodeStack runs talkide dev's stack with --harness claude-code
// and the model simulator.
func startClaudeCodeStack(t testing.TB, logger *slog.Logger) *roles.Dev {
	t.Helper()
	return startDevT(t, roles.DevConfig{
		Agent:  roles.AgentConfig{Harness: "claude-code", ClaudeCodeBin: claudeCodeBin(t)},
		Logger: logger,
	})
}

// processesIn lists the processes whose working directory is under dir.
func processesIn(dir string) []int {
	return proctest.Pids(func(pid int) bool {
		cwd := proctest.Cwd(pid)
		return cwd != "" && (cwd == dir || strings.HasPrefix(cwd, dir+"/"))
	})
}

// theCLI is the pid of the one process working in ws after a turn: the
// Claude Code CLI, which stays for the next.
func theCLI(t *testing.T, ws string) int {
	t.Helper()
	procs := processesIn(ws)
	if len(procs) != 1 {
		t.Fatalf("processes in the workspace after a turn: %v, want the one CLI", procs)
	}
	return procs[0]
}

// waitNoProcessesIn waits, up to within, until no process works in dir.
func waitNoProcessesIn(t *testing.T, dir string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for len(processesIn(dir)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("processes left in the workspace after the interrupt: %v", processesIn(dir))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var messagesN = regexp.MustCompile(`messages=(\d+) you said: `)

// replyMessages is N of the simulator's "messages=N you said: text" reply
// in a turn's events, or -1.
func replyMessages(got []streamed, turnID, text string) int {
	for _, s := range got {
		if s.ev.TurnID == turnID && s.ev.Kind == contract.KindMessage && strings.Contains(s.ev.Text, "you said: "+text) {
			if m := messagesN.FindStringSubmatch(s.ev.Text); m != nil {
				n, _ := strconv.Atoi(m[1])
				return n
			}
		}
	}
	return -1
}

// The end-to-end scenario with the real Claude Code CLI: a tool call, its
// output and the final text on the event stream; a second turn that carries
// the history; a worker restart after which the CLI resumes its session.
func TestClaudeCodeHarnessEndToEnd(t *testing.T) {
	st := startClaudeCodeStack(t, slog.New(slog.DiscardHandler))
	base := st.Info.ControlPlane
	c := createConversation(t, base)
	if c.State == nil || c.State.Harness != "claude-code" {
		t.Fatalf("session state %+v, want harness claude-code", c.State)
	}

	got := firstToolTurn(t, base, c.ID, `Please run it. [[tool:Bash {"command":"echo hello-from-claude-code"}]]`)
	started, finished := toolEvents(got)
	var deltas strings.Builder
	for _, s := range got {
		if s.ev.Kind == contract.KindTextDelta {
			deltas.WriteString(s.ev.Text)
		}
	}
	if started.Name != "Bash" || !strings.Contains(string(started.Input), "echo hello-from-claude-code") {
		t.Errorf("tool.started = %+v", started)
	}
	if finished.ID != started.ID || finished.IsError || strings.TrimSpace(finished.Output) != "hello-from-claude-code" {
		t.Errorf("tool.finished = %+v", finished)
	}
	final := got[len(got)-3].ev
	if !strings.Contains(final.Text, "[simulator] tool results: 1) hello-from-claude-code") {
		t.Errorf("final text %q does not quote the tool's output", final.Text)
	}
	if !strings.Contains(deltas.String(), "tool results: 1) hello-from-claude-code") {
		t.Errorf("the final text did not stream as text.delta events: %q", deltas.String())
	}
	// Both model calls went CLI → LocalGatewayProxy → gateway, which
	// recorded them against this conversation.
	if usage := toolTurnRecorded(t, st, c.ID, got); len(usage) < 2 {
		t.Fatalf("gateway usage records = %d", len(usage))
	}

	// The CLI stays up between turns, with exactly its environment.
	ws := filepath.Join(st.Info.Workspaces, c.ID)
	cli := theCLI(t, ws)
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", cli))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range bytes.Split(bytes.TrimRight(environ, "\x00"), []byte{0}) {
		k, v, _ := strings.Cut(string(kv), "=")
		env[k] = v
	}
	if _, ok := env["ANTHROPIC_API_KEY"]; ok {
		t.Error("the CLI has ANTHROPIC_API_KEY")
	}
	if env["ANTHROPIC_BASE_URL"] != st.Info.LocalProxy+"/"+c.ID || !strings.HasPrefix(env["ANTHROPIC_AUTH_TOKEN"], "tlp_") {
		t.Errorf("the CLI's ANTHROPIC_BASE_URL %q, ANTHROPIC_AUTH_TOKEN prefix %.4q", env["ANTHROPIC_BASE_URL"], env["ANTHROPIC_AUTH_TOKEN"])
	}
	if env["TALKIDE_MCP_TOKEN"] != env["ANTHROPIC_AUTH_TOKEN"] || env["ENABLE_TOOL_SEARCH"] != "false" {
		t.Errorf("the CLI's MCP token is not its capability, or ENABLE_TOOL_SEARCH is %q", env["ENABLE_TOOL_SEARCH"])
	}
	if !strings.HasPrefix(env["CLAUDE_CONFIG_DIR"], st.Info.ClaudeConfigDir+"/") {
		t.Errorf("the CLI's CLAUDE_CONFIG_DIR %q is not on the session volume %s", env["CLAUDE_CONFIG_DIR"], st.Info.ClaudeConfigDir)
	}
	// The harness's twelve (two for the worker's MCP servers), the jail's
	// (the locale, the terminal, the egress proxy), and the command's own
	// TMPDIR; nothing of the worker's.
	allowed := map[string]bool{"PATH": true, "HOME": true, "CLAUDE_CONFIG_DIR": true, "ANTHROPIC_BASE_URL": true,
		"ANTHROPIC_AUTH_TOKEN": true, "DISABLE_TELEMETRY": true, "DISABLE_AUTOUPDATER": true, "DISABLE_ERROR_REPORTING": true,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": true, "CLAUDE_CODE_MAX_RETRIES": true,
		"TALKIDE_MCP_TOKEN": true, "ENABLE_TOOL_SEARCH": true,
		"LANG": true, "TERM": true, "TMPDIR": true,
		"HTTPS_PROXY": true, "https_proxy": true, "HTTP_PROXY": true, "http_proxy": true, "NO_PROXY": true, "no_proxy": true}
	for k := range env {
		if !allowed[k] {
			t.Errorf("the CLI's environment has %s, which neither the harness nor the jail sets", k)
		}
	}
	if len(env) != len(allowed) {
		t.Errorf("the CLI's environment has %d variables, want %d: %v", len(env), len(allowed), env)
	}

	// The second turn carries the history.
	r2 := send(t, base, c.ID, "second message beta")
	got2 := readStream(t, base, c.ID, got[len(got)-1].ev.Seq, turnEnded(r2.TurnID))
	n2 := replyMessages(got2, r2.TurnID, "second message beta")
	if n2 < 5 {
		t.Fatalf("second turn: the model saw %d messages, want the first turn's too; events %+v", n2, got2)
	}
	t.Logf("messages: second turn %d", n2)
	if p := processesIn(ws); len(p) != 1 || p[0] != cli {
		t.Errorf("processes after the second turn %v, want the same CLI %d", p, cli)
	}

	// A worker restart stops the CLI; the next turn resumes its session.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := st.RestartWorker(ctx); err != nil {
		t.Fatalf("restart worker: %v", err)
	}
	if p := processesIn(ws); len(p) != 0 {
		t.Fatalf("processes left in the workspace after the worker stopped: %v", p)
	}
	r3 := send(t, base, c.ID, "third message gamma")
	got3 := readStream(t, base, c.ID, got2[len(got2)-1].ev.Seq, turnEnded(r3.TurnID))
	n3 := replyMessages(got3, r3.TurnID, "third message gamma")
	if n3 <= n2 {
		t.Fatalf("after the restart the model saw %d messages, want more than %d (the resumed history)", n3, n2)
	}
	var resumed bool
	for _, s := range got3 {
		if s.ev.Kind == contract.KindSessionResumed {
			resumed = true
			if s.ev.Session.Harness != "claude-code" || s.ev.Session.Messages < 4 {
				t.Errorf("session.resumed = %+v", s.ev.Session)
			}
		}
	}
	if !resumed {
		t.Error("no session.resumed event after the restart")
	}
	if last := got3[len(got3)-1].ev; last.Kind != contract.KindTurnFinished {
		t.Errorf("third turn ended with %s %+v", last.Kind, last.Failure)
	}
}

// toolTurn sends text, waits for the turn's end and returns its one tool
// call's tool.finished and the turn's last event.
func toolTurn(t *testing.T, base, conv string, after int64, text string) (*contract.ToolEvent, contract.Event) {
	t.Helper()
	r := send(t, base, conv, text)
	got := readStream(t, base, conv, after, turnEnded(r.TurnID))
	var finished *contract.ToolEvent
	for _, s := range got {
		if s.ev.Kind == contract.KindToolFinished {
			finished = s.ev.Tool
		}
	}
	if finished == nil {
		t.Fatalf("%s: no tool call in %+v", text, got)
	}
	return finished, got[len(got)-1].ev
}

// The coding session of the native harness's scenario, with Claude Code's
// own tools: write a file, run it, find the bug, fix it, run it again; then
// an interrupt during a long Bash command, after which the session goes on.
func TestClaudeCodeHarnessCodingSessionAndInterrupt(t *testing.T) {
	st := startClaudeCodeStack(t, slog.New(slog.DiscardHandler))
	base := st.Info.ControlPlane
	c := createConversation(t, base)
	ws := filepath.Join(st.Info.Workspaces, c.ID)
	app := filepath.Join(ws, "app.sh")

	steps := []struct {
		text    string
		isError bool
		output  string
	}{
		{text: fmt.Sprintf(`[[tool:Write {"file_path":%q,"content":"echo hello wrold\nexit 1\n"}]]`, app)},
		{text: `[[tool:Bash {"command":"sh app.sh"}]]`, isError: true, output: "hello wrold"},
		{text: `[[tool:Bash {"command":"grep -n wrold app.sh"}]]`, output: "1:echo hello wrold"},
		{text: fmt.Sprintf(`[[tool:Edit {"file_path":%q,"old_string":"wrold\nexit 1","new_string":"world"}]]`, app)},
		{text: `[[tool:Bash {"command":"sh app.sh"}]]`, output: "hello world"},
		{text: fmt.Sprintf(`[[tool:Read {"file_path":%q}]]`, app), output: "echo hello world"},
	}
	var last int64
	for _, s := range steps {
		fin, end := toolTurn(t, base, c.ID, last, s.text)
		last = end.Seq
		if end.Kind != contract.KindTurnFinished {
			t.Fatalf("%s: turn ended with %s %+v", s.text, end.Kind, end.Failure)
		}
		if fin.IsError != s.isError || !strings.Contains(fin.Output, s.output) {
			t.Errorf("%s: tool.finished = %+v, want is_error %v and output with %q", s.text, fin, s.isError, s.output)
		}
	}
	if b, err := os.ReadFile(app); err != nil || string(b) != "echo hello world\n" {
		t.Errorf("app.sh = %q, %v", b, err)
	}

	// An interrupt during a long command kills it and the CLI.
	r := send(t, base, c.ID, `[[tool:Bash {"command":"for i in $(seq 600); do sleep 0.1; done; echo never"}]]`)
	readStream(t, base, c.ID, last, func(ev contract.Event) bool { return ev.Kind == contract.KindToolStarted })
	var ir contract.InterruptResponse
	if code := api(t, "POST", base+"/api/conversations/"+c.ID+"/interrupt", nil, &ir); code != 200 || !ir.Interrupted {
		t.Fatalf("interrupt: %d %+v", code, ir)
	}
	got := readStream(t, base, c.ID, last, turnEnded(r.TurnID))
	end := got[len(got)-1].ev
	if end.Kind != contract.KindTurnFailed || end.Failure.Code != contract.FailInterrupted {
		t.Fatalf("interrupted turn ended with %s %+v", end.Kind, end.Failure)
	}
	waitNoProcessesIn(t, ws, 5*time.Second)
	// The session goes on, with its history.
	r2 := send(t, base, c.ID, "after the interrupt")
	got2 := readStream(t, base, c.ID, end.Seq, turnEnded(r2.TurnID))
	if n := replyMessages(got2, r2.TurnID, "after the interrupt"); n < 2*len(steps) {
		t.Errorf("after the interrupt the model saw %d messages, want the session's history; events %+v", n, got2)
	}
}

// TestClaudeCodeSandboxStopsTheAttacks: with the Claude Code harness the
// CLI, and the Bash it runs for the model, are in the conversation's jail:
// from A's CLI, B's session and workspace, the worker's secrets and
// environment, the worker itself and loopback services are out of reach,
// while A's own workspace works.
func TestClaudeCodeSandboxStopsTheAttacks(t *testing.T) {
	st := startClaudeCodeStack(t, slog.New(slog.DiscardHandler))
	base := st.Info.ControlPlane
	a, b := createConversation(t, base).ID, createConversation(t, base).ID
	bash := func(conv, command string) *contract.ToolEvent {
		t.Helper()
		in, _ := json.Marshal(map[string]any{"command": command})
		r := send(t, base, conv, "[[tool:Bash "+string(in)+"]]")
		for _, s := range readStream(t, base, conv, 0, turnEnded(r.TurnID)) {
			if s.ev.Kind == contract.KindToolFinished && s.ev.TurnID == r.TurnID {
				return s.ev.Tool
			}
		}
		t.Fatalf("no tool.finished in turn %s", r.TurnID)
		return nil
	}
	if res := bash(b, `echo "B's secret plans" > plans.txt`); res.IsError {
		t.Fatalf("B's own command: %+v", res)
	}
	bSession := filepath.Join(st.Info.ClaudeConfigDir, "projects", b)
	cpURL, _ := url.Parse(base)
	worker := strconv.Itoa(os.Getpid())
	attacks := map[string]string{
		"bws":   "cat " + filepath.Join(st.Info.Workspaces, b, "plans.txt"),
		"btr":   "cat " + filepath.Join(bSession, "transcript.jsonl") + " " + filepath.Join(bSession, "events.jsonl"),
		"bcli":  "ls " + filepath.Join(bSession, "claude-code", "config"),
		"tok":   "cat " + filepath.Join(st.Config().DataDir, "worker", "identity-token"),
		"keys":  "cat " + filepath.Join(st.Config().DataDir, "controlplane-secrets.json"),
		"env":   "cat /proc/" + worker + "/environ",
		"stop":  "kill -STOP " + worker,
		"api":   "exec 3<>/dev/tcp/127.0.0.1/" + cpURL.Port(),
		"write": "echo pwned > " + filepath.Join(st.Info.Workspaces, b, "pwned"),
	}
	var script strings.Builder
	for short, cmd := range attacks {
		fmt.Fprintf(&script, "if ( %s ) >/dev/null 2>&1; then echo LEAK:%s; else echo no:%s; fi\n", cmd, short, short)
	}
	script.WriteString("echo mine > mine.txt && cat mine.txt")
	res := bash(a, script.String())
	for short := range attacks {
		if !strings.Contains(res.Output, "no:"+short) {
			t.Errorf("%s: %q was not refused to A's CLI: %s", short, attacks[short], res.Output)
		}
	}
	if !strings.Contains(res.Output, "mine") {
		t.Errorf("A's own workspace: %s", res.Output)
	}
	if _, err := os.Stat(filepath.Join(st.Info.Workspaces, b, "pwned")); err == nil {
		t.Error("A's CLI wrote into B's workspace")
	}
}
