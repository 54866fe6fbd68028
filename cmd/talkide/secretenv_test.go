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
	"time"

	"golang.org/x/sys/unix"

	"github.com/talkide/platform/internal/anthropicsim"
	"github.com/talkide/platform/internal/secretenv"
	"github.com/talkide/platform/internal/syncbuf"
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
	bin := talkideBinary(t)
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

	// talkide worker given its identity token and command key in the
	// environment: it uses them, and its environ and descriptors hold
	// neither once it serves.
	t.Run("worker", func(t *testing.T) {
		const token, cmdKey = "tki_worker-token-in-the-environment", "c1:d29ya2VyLWNvbW1hbmQta2V5LWluLXRoZS1lbnZpcm9ubWVudCE="
		var logs syncbuf.Buffer
		w := exec.Command(bin, "worker", "--tenant", "t", "--env", "e", "--listen", "127.0.0.1:0")
		w.Stdout, w.Stderr = &logs, &logs
		w.Env = append(os.Environ(), "TALKIDE_GATEWAY_BASE_URL=http://127.0.0.1:1", "CLAUDE_CONFIG_DIR="+filepath.Join(dir, "worker-sessions"),
			"TALKIDE_WORKER_IDENTITY_TOKEN="+token, "TALKIDE_WORKER_COMMAND_KEY="+cmdKey)
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			w.Process.Signal(syscall.SIGTERM)
			w.Wait()
		}()
		for deadline := time.Now().Add(60 * time.Second); !strings.Contains(logs.String(), "worker serving"); time.Sleep(20 * time.Millisecond) { // polling another process's log
			if time.Now().After(deadline) {
				t.Fatalf("the worker did not start:\n%s", logs.String())
			}
		}
		pid := strconv.Itoa(w.Process.Pid)
		environ, err := os.ReadFile("/proc/" + pid + "/environ")
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{token, cmdKey[3:], "TALKIDE_WORKER_IDENTITY_TOKEN", "TALKIDE_WORKER_COMMAND_KEY"} {
			if bytes.Contains(environ, []byte(secret)) {
				t.Errorf("/proc/<worker>/environ holds %s", secret)
			}
		}
		fds, _ := os.ReadDir("/proc/" + pid + "/fd")
		for _, fd := range fds {
			if target, _ := os.Readlink("/proc/" + pid + "/fd/" + fd.Name()); strings.Contains(target, "talkide-secrets") {
				t.Errorf("the worker keeps the handed-over secrets open as fd %s (%s)", fd.Name(), target)
			}
		}
	})
}

func TestUndumpable(t *testing.T) {
	if err := secretenv.Undumpable(); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0)
	if v, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err != nil || v != 0 {
		t.Fatalf("dumpable = %d, %v; want 0", v, err)
	}
}
