package claudecode

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/harness"
)

// FuzzMapper feeds arbitrary lines to the mapper: whatever the CLI prints,
// the harness must not panic, and every tool call it reports started is
// finished by the end of the turn.
func FuzzMapper(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(transcriptDir, "*.jsonl"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		for _, l := range bytes.Split(b, []byte("\n")) {
			if len(l) < 4096 {
				f.Add(l)
			}
		}
	}
	f.Add([]byte(`{"type":"assistant","message":{"id":"m","content":"plain string"}}`))
	f.Add([]byte(`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"x","content":[{"type":"image"}]}]}}`))
	f.Add([]byte(`{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["boom"]}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		open := map[string]bool{}
		turn := &harness.Turn{
			Transcript: &harness.MemTranscript{},
			Emit: func(ev contract.Event) {
				switch ev.Kind {
				case contract.KindToolStarted:
					open[ev.Tool.ID] = true
				case contract.KindToolFinished:
					delete(open, ev.Tool.ID)
				}
			},
			Report: func(contract.Report) {},
		}
		m := newMapper(turn, time.Now, slog.New(slog.DiscardHandler), 100)
		m.handle([]byte(`{"type":"assistant","message":{"id":"m0","content":[{"type":"tool_use","id":"t0","name":"Bash","input":{}}]}}`))
		m.handle(line)
		m.handle(line)
		if done, _, _ := m.handle([]byte(`{"type":"result","subtype":"success"}`)); !done {
			t.Fatal("a result line did not end the turn")
		}
		if len(open) > 0 {
			t.Fatalf("tool calls left open: %v", open)
		}
	})
}
