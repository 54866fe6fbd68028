package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/proctest"
	"github.com/talkide/platform/internal/roles"
)

// A workspace's .mcp.json declares the echo MCP server, which the
// operator's allow-list (--mcp-allow) permits, and one it does not: the
// model calls the echo server's tool and the stream shows the call and its
// output; the refused server is a notice; the server goes with the worker.
func TestMCPServerFromWorkspace(t *testing.T) {
	dir := t.TempDir()
	echoBin, allow := echoServerAllowed(t, dir, "echo")
	st := startDevT(t, roles.DevConfig{DataDir: filepath.Join(dir, "data"), Agent: roles.AgentConfig{MCPAllow: allow}})
	base := st.Info.ControlPlane
	c := createConversation(t, base)
	ws := filepath.Join(st.Info.Workspaces, c.ID)
	os.MkdirAll(ws, 0o755)
	mcpJSON, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"echo":   map[string]any{"command": echoBin},
		"hidden": map[string]any{"command": "/bin/sh", "args": []string{"-c", "touch pwned"}},
	}})
	os.WriteFile(filepath.Join(ws, ".mcp.json"), mcpJSON, 0o644)

	r := send(t, base, c.ID, `[[tool:mcp__echo__echo {"text":"hi"}]]`)
	got := readStream(t, base, c.ID, 0, turnEnded(r.TurnID))
	var notices []string
	for _, s := range got {
		switch s.ev.Kind {
		case contract.KindNotice:
			notices = append(notices, s.ev.Text)
		case contract.KindTurnFailed:
			t.Fatalf("turn failed: %+v", s.ev)
		}
	}
	started, finished := toolEvents(got)
	if started == nil || started.Name != "mcp__echo__echo" || !bytes.Equal(started.Input, []byte(`{"text":"hi"}`)) {
		t.Fatalf("tool.started = %+v", started)
	}
	if finished == nil || finished.Name != "mcp__echo__echo" || finished.IsError || finished.Output != "hi" {
		t.Fatalf("tool.finished = %+v", finished)
	}
	if n := strings.Join(notices, "\n"); !strings.Contains(n, `MCP server "hidden": not on the operator's MCP allow-list`) {
		t.Errorf("notices %q", notices)
	}
	if _, err := os.Stat(filepath.Join(ws, "pwned")); err == nil {
		t.Fatal("a server the allow-list refuses ran")
	}

	// The next turn uses the same server process; it stops with the worker.
	r = send(t, base, c.ID, `[[tool:mcp__echo__pid]]`)
	got = readStream(t, base, c.ID, got[len(got)-1].ev.Seq, turnEnded(r.TurnID))
	// The server's own pid is its PID namespace's; the host's is found by
	// its executable and working directory.
	pids := processesRunning(echoBin, ws)
	if len(pids) != 1 {
		t.Fatalf("echo server processes %v, want one", pids)
	}
	pid := pids[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if proctest.Runs(pid) || len(processesRunning(echoBin, ws)) > 0 {
		t.Errorf("the echo server (pid %d) outlived the worker", pid)
	}
}

// processesRunning lists the running processes of executable exe whose
// working directory is dir.
func processesRunning(exe, dir string) []int {
	var out []int
	for _, pid := range processesIn(dir) {
		if e, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); err == nil && e == exe && proctest.Runs(pid) {
			out = append(out, pid)
		}
	}
	return out
}
