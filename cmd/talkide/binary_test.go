package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/talkide/platform/internal/roles"
)

// testBinary is the talkide binary the tests that run it as a process
// start. It is built once per test run, and with the race detector when
// the tests have it: it then shares the tests' compiled packages, where a
// build of its own compiled every dependency once more (minutes on a new
// machine), and the race detector watches the real binary too (a race
// makes it exit 66).
var testBinary struct {
	once sync.Once
	dir  string // the binary's directory, removed by TestMain
	err  error
}

// talkideBinary returns the path of the test run's talkide binary.
func talkideBinary(t testing.TB) string {
	t.Helper()
	testBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "talkide-binary-")
		if err != nil {
			testBinary.err = err
			return
		}
		testBinary.dir = dir
		args := []string{"build", "-o", filepath.Join(dir, "talkide")}
		if raceEnabled {
			args = append(args, "-race")
		}
		if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
			testBinary.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if testBinary.err != nil {
		t.Fatal(testBinary.err)
	}
	return filepath.Join(testBinary.dir, "talkide")
}

// linkedBinary links the test run's talkide binary into dir, for a test
// that needs files beside it (talkide dev finds its sandbox helper beside
// its executable) or a directory another user may read.
func linkedBinary(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "talkide")
	if err := os.Link(talkideBinary(t), bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestDevBinaryStartsAndStopsOnSIGTERM runs the real binary as a newcomer
// would: talkide dev writes dev.json naming every part, serves a turn through
// talkide chat, and exits 0 on SIGTERM.
func TestDevBinaryStartsAndStopsOnSIGTERM(t *testing.T) {
	dir := t.TempDir()
	bin := talkideBinary(t)
	data := filepath.Join(dir, "data")
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "dev", "--data-dir", data, "--addr", "127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "ANTHROPIC_API_KEY=")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	info := waitDevJSON(t, data, stderr.String)
	for name, u := range map[string]string{"controlplane": info.ControlPlane, "worker": info.Worker, "gateway": info.Gateway, "localproxy": info.LocalProxy, "simulator": info.Simulator} {
		if !strings.HasPrefix(u, "http://127.0.0.1:") {
			t.Errorf("dev.json %s = %q, want a loopback URL", name, u)
		}
	}
	if info.ClaudeConfigDir == "" || !info.SimulatedModel {
		t.Errorf("dev.json = %+v", info)
	}
	resp, err := http.Get(info.Worker + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("worker health: %v %v", resp, err)
	}
	resp.Body.Close()

	chat := exec.Command(bin, "chat", "--data-dir", data, "-m", "hi from the binary")
	out, err := chat.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "[simulator] messages=1 you said: hi from the binary") {
		t.Fatalf("chat: %v\n%s", err, out)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) || err != nil {
			t.Fatalf("talkide dev exited with %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("talkide dev did not exit within 30 s of SIGTERM; stderr:\n%s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "MODEL SIMULATOR") || !strings.Contains(stderr.String(), "shutting down") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
}

// waitDevJSON waits until a talkide dev process has written data/dev.json
// and returns it; output says what the process printed, for a failure.
func waitDevJSON(t *testing.T, data string, output func() string) roles.DevInfo {
	t.Helper()
	var info roles.DevInfo
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(data, "dev.json"))
		if err == nil && json.Unmarshal(b, &info) == nil {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("no dev.json after 30 s; output:\n%s", output())
		}
		time.Sleep(20 * time.Millisecond) // polling a file another process writes
	}
}
