package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/roles"
)

// A deployment's tool policy reaches the harness: a denied call is a result
// the model sees and an event the user sees, and the command never runs.
func TestToolPolicyFromFile(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.json")
	os.WriteFile(policy, []byte(`{"rules":[{"name":"no-touch","tool":"Bash","action":"deny","commands":["touch *"],"reason":"no new files"}]}`), 0o600)
	st := startDevT(t, roles.DevConfig{DataDir: filepath.Join(dir, "data"), Agent: roles.AgentConfig{ToolPolicy: policy}})
	base := st.Info.ControlPlane
	c := createConversation(t, base)
	r := send(t, base, c.ID, `[[tool:Bash {"command":"echo ok && touch marker"}]]`)
	got := readStream(t, base, c.ID, 0, turnEnded(r.TurnID))
	var denied *contract.ToolEvent
	for _, s := range got {
		if s.ev.Kind == contract.KindToolFinished {
			denied = s.ev.Tool
		}
	}
	if denied == nil || !denied.IsError || !strings.Contains(denied.Output, "no-touch") {
		t.Fatalf("tool.finished = %+v", denied)
	}
	if _, err := os.Stat(filepath.Join(st.Info.Workspaces, c.ID, "marker")); err == nil {
		t.Fatal("the denied command ran")
	}
	if _, err := roles.StartDev(context.Background(), roles.DevConfig{DataDir: filepath.Join(dir, "bad"), Addr: "127.0.0.1:0", Agent: roles.AgentConfig{ToolPolicy: filepath.Join(dir, "missing.json")}, Logger: slog.New(slog.DiscardHandler)}); err == nil {
		t.Fatal("a missing policy file was accepted")
	}
}
