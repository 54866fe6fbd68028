package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/syncbuf"
)

// TestDevShutdownDuringATurn: the first Ctrl-C says what talkide dev waits
// for; the second ends the wait at once, talkide dev ends without an
// error, and the running turn ends as worker_restarted, written before the
// worker stops. The turn is in a tool call, or waiting for the model: then
// the gateway's call to the model (drained after the worker left) and the
// simulator's answer were still open when the wait was cut short, which
// made talkide dev end with "context canceled" and exit 1.
func TestDevShutdownDuringATurn(t *testing.T) {
	tests := map[string]struct {
		message string
		busy    func(t *testing.T, base, conv string, logs *syncbuf.Buffer) // returns once the turn is at it
	}{
		"in a tool call": {`[[tool:Bash {"command":"sleep 600"}]]`, func(t *testing.T, base, conv string, _ *syncbuf.Buffer) {
			readStream(t, base, conv, 0, func(ev contract.Event) bool { return ev.Kind == contract.KindToolStarted })
		}},
		"waiting for the model": {`take your time [[sleep:60000]]`, func(t *testing.T, _, _ string, logs *syncbuf.Buffer) {
			// The simulator says so on its first request, which is this
			// turn's model call.
			waitFor(t, logs, "anthropic simulator serving")
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			logs, out := &syncbuf.Buffer{}, &syncbuf.Buffer{}
			sigs := make(chan os.Signal, 2)
			done := make(chan error, 1)
			cfg := roles.DevConfig{DataDir: dir, Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(logs, nil))}
			go func() { done <- runDev(context.Background(), cfg, stdio{out: out, err: logs, signals: sigs}) }()
			waitFor(t, out, "Press Ctrl-C to stop.")
			if !strings.Contains(out.String(), `user "local"`) || !strings.Contains(out.String(), " chat --data-dir "+dir) {
				t.Errorf("the banner does not name the dev user and the chat command:\n%s", out.String())
			}
			var info roles.DevInfo
			b, err := os.ReadFile(filepath.Join(dir, "dev.json"))
			if err != nil || json.Unmarshal(b, &info) != nil {
				t.Fatalf("dev.json: %v", err)
			}
			base := info.ControlPlane
			conv := createConversation(t, base)
			sent := send(t, base, conv.ID, tc.message)
			tc.busy(t, base, conv.ID, logs)

			sigs <- os.Interrupt
			waitFor(t, logs, "waiting up to 30s for 1 running turn(s) to finish; press Ctrl-C again")
			select {
			case err := <-done:
				t.Fatalf("talkide dev stopped without waiting for the turn: %v", err)
			default:
			}
			sigs <- os.Interrupt
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("runDev after the second signal: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("talkide dev did not stop after the second signal; log:\n%s", logs.String())
			}
			if !strings.Contains(logs.String(), "second signal: stopping running turns now") {
				t.Errorf("the log does not say the second signal cut the wait short:\n%s", logs.String())
			}

			// The turn's end was written by the stopping worker, not left for
			// the next start to repair.
			st := startDevT(t, roles.DevConfig{DataDir: dir})
			got := readStream(t, st.Info.ControlPlane, conv.ID, 0, turnEnded(sent.TurnID))
			end := got[len(got)-1].ev
			if end.Kind != contract.KindTurnFailed || end.Failure == nil || end.Failure.Code != contract.FailWorkerRestarted ||
				!strings.Contains(end.Failure.Message, "shut down before this turn finished") {
				t.Fatalf("the turn ended with %+v, want turn.failed worker_restarted from the shutdown", end)
			}
		})
	}
}

// TestRunAgain: the banner's chat command is one the user can type. A go
// run user has no talkide binary: the path go run ran is a temporary or
// cached build.
func TestRunAgain(t *testing.T) {
	hash := strings.Repeat("0123456789abcdef", 4)
	tests := []struct{ exe, arg0, want string }{
		{"/tmp/go-build1234/b001/exe/talkide", "/tmp/go-build1234/b001/exe/talkide", "go run ./cmd/talkide"},
		{"/root/.cache/go-build/d0/" + hash + "-d/talkide", "/root/.cache/go-build/d0/" + hash + "-d/talkide", "go run ./cmd/talkide"},
		{"/srv/gocache/d0/" + hash + "-d/talkide", "/srv/gocache/d0/" + hash + "-d/talkide", "go run ./cmd/talkide"}, // GOCACHE elsewhere
		{"/home/u/go/bin/talkide", "talkide", "talkide"},
		{"/home/u/src/talkide/talkide", "./talkide", "./talkide"},
		{"/home/u/bin/talkide-d/talkide", "talkide", "talkide"},
		{"", "", "talkide"},
	}
	for _, tc := range tests {
		if got := runAgain(tc.exe, tc.arg0); got != tc.want {
			t.Errorf("runAgain(%q, %q) = %q, want %q", tc.exe, tc.arg0, got, tc.want)
		}
	}
}
