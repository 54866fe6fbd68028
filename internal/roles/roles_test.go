package roles

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Every goroutine a role starts is owned: after Stop, none is left. dev
// runs all three roles (the simulator, the control-plane, the worker with
// its sandbox, proxies and reporter) and a turn through them, so that
// what only a turn starts (streams, sessions, a sandboxed command) is
// stopped too.
func TestStopLeavesNoGoroutine(t *testing.T) {
	// What the test itself runs before the roles start, and the HTTP
	// client's idle connections, which the client owns.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
	ctx := context.Background()
	var logs bytes.Buffer
	d, err := StartDev(ctx, DevConfig{
		DataDir: filepath.Join(t.TempDir(), "data"), Addr: "127.0.0.1:0",
		Agent:  AgentConfig{Sandbox: "landlock"},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	turn(t, d.Info.ControlPlane, `[[tool:Bash {"command":"echo from-the-sandbox"}]]`)
	workerLoadExported(t, d.Info.Worker)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.Stop(sctx); err != nil {
		t.Fatalf("Stop: %v\n%s", err, logs.String())
	}
	http.DefaultClient.CloseIdleConnections()
}

// workerLoadExported checks the worker's /metrics after one turn: the
// commands it answered counted, its bound given, nothing refused.
func workerLoadExported(t *testing.T, base string) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("worker /metrics: %s %s", resp.Status, b)
	}
	values := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if name, v, ok := strings.Cut(line, " "); ok && strings.HasPrefix(name, "talkide_worker_") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			values[name] = f
		}
	}
	if values["talkide_worker_commands_total"] < 2 || values["talkide_worker_turns_max"] < 1 ||
		values["talkide_worker_sessions_open"] != 1 ||
		values[`talkide_worker_commands_refused_total{code="worker_busy"}`] != 0 {
		t.Errorf("worker metrics after one turn: %v", values)
	}
	for _, series := range []string{
		`talkide_worker_commands_refused_total{code="session_elsewhere"}`,
		`talkide_worker_commands_forwarded_total{reason="holder"}`, `talkide_worker_commands_forwarded_total{reason="placement"}`,
		`talkide_worker_sessions_released_total{reason="rebalance"}`, `talkide_worker_sessions_released_total{reason="drain"}`,
	} {
		if v, ok := values[series]; !ok || v != 0 {
			t.Errorf("%s: %v, %v; want the series, at 0 (one replica)", series, v, ok)
		}
	}
}

// turn creates a conversation at base, sends text, and waits for the
// turn's end in the conversation's event stream, which must hold the
// command's output.
func turn(t *testing.T, base, text string) {
	t.Helper()
	conv := createConversation(t, base)
	sendMessage(t, base, conv, text, "")
	waitTurn(t, base, conv, "from-the-sandbox")
}
