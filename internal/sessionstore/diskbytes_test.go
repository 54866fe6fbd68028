package sessionstore

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
)

// BenchmarkDiskBytesPerTurn writes realistic turns and reports the bytes
// each adds to the event log, the transcript and the outbox. A turn: the
// user's message, turn.started, 40 text.delta events of ~30 bytes, the
// assistant message they make up, its usage, one shell command whose 2 KiB
// result ends in tool.finished, a short closing message with its usage,
// turn.finished; the four transcript records of that exchange; two reports
// (usage and tool use). "streamed-tool" also streams the command's output
// as tool.output chunks first, as the native harness does for Bash.
func BenchmarkDiskBytesPerTurn(b *testing.B) {
	for _, streamed := range []bool{false, true} {
		name := "tool"
		if streamed {
			name = "streamed-tool"
		}
		b.Run(name, func(b *testing.B) {
			st := newStore(b)
			sess := mustCreate(b, st, "c_01jbench0000000000000000", Meta{Harness: "native", UserID: "local"})
			defer sess.Close()
			dir := sess.Dir()
			before := fileSizes(b, dir)
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				writeTurn(b, sess, n, streamed)
				n++
			}
			if err := sess.Sync(); err != nil {
				b.Fatal(err)
			}
			after := fileSizes(b, dir)
			total := 0.0
			for _, f := range []struct{ file, unit string }{
				{eventsFile, "events-B/turn"},
				{transcriptFile, "transcript-B/turn"},
				{outboxFile, "outbox-B/turn"},
			} {
				per := float64(after[f.file]-before[f.file]) / float64(n)
				b.ReportMetric(per, f.unit)
				total += per
			}
			b.ReportMetric(total, "total-B/turn")
		})
	}
}

func fileSizes(b *testing.B, dir string) map[string]int64 {
	b.Helper()
	out := map[string]int64{}
	for _, name := range []string{eventsFile, transcriptFile, outboxFile} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			b.Fatal(err)
		}
		out[name] = st.Size()
	}
	return out
}

// writeTurn appends one turn as the worker and the native harness write
// it, and syncs it as a turn's end does.
func writeTurn(b *testing.B, s *Session, n int, streamed bool) {
	b.Helper()
	conv := s.Meta().ConversationID
	turn := fmt.Sprintf("t_01jbenchturn%012d", n)
	toolID := fmt.Sprintf("toolu_01Bench%015d", n)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Second)
	deltas := make([]string, 40)
	for i := range deltas {
		deltas[i] = fmt.Sprintf("word%02d of the streamed reply. ", i)[:30]
	}
	text := strings.Join(deltas, "")
	output := strings.Repeat("ok   github.com/talkide/platform/internal/x  0.1s\n", 2048/50+1)[:2048]
	input := json.RawMessage(`{"command":"go test ./..."}`)
	usage := &contract.Usage{Model: "claude-sonnet-4-5", InputTokens: 1834, OutputTokens: 312, CacheReadInputTokens: 12011}

	events := []contract.Event{
		{Kind: contract.KindUserMessage, ClientMessageID: fmt.Sprintf("m_01jbenchmsg%012d", n), Text: "Please run the tests and tell me what fails."},
		{Kind: contract.KindTurnStarted},
	}
	for _, d := range deltas {
		events = append(events, contract.Event{Kind: contract.KindTextDelta, Text: d})
	}
	events = append(events,
		contract.Event{Kind: contract.KindMessage, Text: text},
		contract.Event{Kind: contract.KindUsage, Usage: usage},
		contract.Event{Kind: contract.KindToolStarted, Tool: &contract.ToolEvent{ID: toolID, Name: "Bash", Input: input}},
	)
	if streamed {
		for i := 0; i < len(output); i += 512 {
			events = append(events, contract.Event{Kind: contract.KindToolOutput, Tool: &contract.ToolEvent{ID: toolID, Name: "Bash", Output: output[i:min(i+512, len(output))]}})
		}
	}
	events = append(events,
		contract.Event{Kind: contract.KindToolFinished, Tool: &contract.ToolEvent{ID: toolID, Name: "Bash", Output: output, DurationMS: 2140}},
		contract.Event{Kind: contract.KindMessage, Text: "All tests pass."},
		contract.Event{Kind: contract.KindUsage, Usage: usage},
		contract.Event{Kind: contract.KindTurnFinished, Finish: &contract.TurnFinish{StopReason: "end_turn", ModelCalls: 2, DurationMS: 9120}},
	)
	for i := range events {
		events[i].ConversationID, events[i].TurnID, events[i].Time = conv, turn, now
		if err := s.AppendEvent(&events[i]); err != nil {
			b.Fatal(err)
		}
	}
	block := func(v any) string { out, _ := json.Marshal(v); return string(out) }
	records := []string{
		`{"role":"user","content":[{"type":"text","text":"Please run the tests and tell me what fails."}]}`,
		`{"role":"assistant","content":[{"type":"text","text":` + block(text) + `},{"type":"tool_use","id":"` + toolID + `","name":"Bash","input":{"command":"go test ./..."}}]}`,
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + toolID + `","content":` + block(output) + `}]}`,
		`{"role":"assistant","content":[{"type":"text","text":"All tests pass."}]}`,
	}
	for _, r := range records {
		if err := s.AppendTranscript(json.RawMessage(r), false); err != nil {
			b.Fatal(err)
		}
	}
	for _, r := range []contract.Report{
		{IdempotencyKey: conv + "/" + turn + "/usage-msg_01Bench" + turn, Kind: contract.ReportUsage, Usage: usage},
		{IdempotencyKey: conv + "/" + turn + "/tool-" + toolID, Kind: contract.ReportToolUse, Tool: &contract.ToolReport{ID: toolID, Name: "Bash", DurationMS: 2140}},
	} {
		r.ConversationID, r.TurnID, r.Time = conv, turn, now
		if _, err := s.AppendReport(r); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Sync(); err != nil {
		b.Fatal(err)
	}
}
