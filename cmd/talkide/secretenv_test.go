package main

import (
	"bytes"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/talkide/platform/internal/anthropicsim"
)

// TestSecretsLeaveTheEnvironment: talkide dev given ANTHROPIC_API_KEY in
// its environment uses it (a real turn through the gateway needs it) and
// yet no environment holds it: not its own /proc/<pid>/environ, not what
// the agent's commands see.
func TestSecretsLeaveTheEnvironment(t *testing.T) {
	const key = "sk-ant-test-handed-over-0123456789"
	sim := anthropicsim.New(key, nil)
	up := httptest.NewServer(sim)
	defer up.Close()

	dir := t.TempDir()
	bin := filepath.Join(dir, "talkide")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "data")
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "dev", "--data-dir", data, "--addr", "127.0.0.1:0", "--anthropic-url", up.URL)
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	cmd.Env = append(os.Environ(), "ANTHROPIC_API_KEY="+key)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	info := waitDevJSON(t, data, stderr.String)
	if info.SimulatedModel {
		t.Fatal("dev did not take the key")
	}
	// A turn reaches the model with the key, and the agent's command
	// prints its environment.
	out, err := exec.Command(bin, "chat", "--data-dir", data, "-m", `[[tool:Bash {"command":"env; cat /proc/$PPID/environ; echo"}]]`).CombinedOutput()
	if err != nil {
		t.Fatalf("chat: %v\n%s", err, out)
	}
	if len(sim.Requests()) == 0 {
		t.Fatal("the model was never called")
	}
	if strings.Contains(string(out), key) {
		t.Errorf("the agent's command saw the key:\n%s", out)
	}
	environ, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(environ, []byte(key)) {
		t.Error("/proc/<dev>/environ holds the key")
	}
}

func TestUndumpable(t *testing.T) {
	if err := undumpable(); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0)
	if v, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err != nil || v != 0 {
		t.Fatalf("dumpable = %d, %v; want 0", v, err)
	}
}
