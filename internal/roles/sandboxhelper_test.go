package roles

import (
	"bytes"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// builtHelper builds cmd/talkide-sandbox for the test.
func builtHelper(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), helperName)
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/talkide-sandbox").CombinedOutput(); err != nil {
		t.Fatalf("go build talkide-sandbox: %v\n%s", err, out)
	}
	return bin
}

// The worker takes talkide-sandbox from beside its executable only when
// it was built from the same code, and says at start-up which helper it
// uses.
func TestSandboxHelperIsFoundBesideTheExecutable(t *testing.T) {
	built := builtHelper(t)
	dir := t.TempDir()
	exe := filepath.Join(dir, "talkide")
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	if got := sandboxHelper("", exe, log); got != "" {
		t.Errorf("nothing beside: helper %q, want the executable itself", got)
	}
	if !strings.Contains(logs.String(), "re-executed for every command") {
		t.Errorf("the fallback is not said: %s", logs.String())
	}

	beside := filepath.Join(dir, helperName)
	os.WriteFile(beside, []byte("#!/bin/sh\necho stale\n"), 0o755)
	logs.Reset()
	if got := sandboxHelper("", exe, log); got != "" {
		t.Errorf("a stale helper beside: %q was taken", got)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "other code") {
		t.Errorf("a stale helper is not warned about: %s", logs.String())
	}

	b, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(beside, b, 0o755)
	logs.Reset()
	if got := sandboxHelper("", exe, log); got != beside {
		t.Errorf("talkide-sandbox of this build beside: helper %q, want %q (%s)", got, beside, logs.String())
	}
	if got := sandboxHelper("/some/where", exe, log); got != "/some/where" {
		t.Errorf("--sandbox-helper: %q", got)
	}
}
