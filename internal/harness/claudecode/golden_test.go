package claudecode

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/goldenfile"
	"github.com/talkide/platform/internal/harness"
)

// -update rewrites the golden event files from the transcripts; with
// TALKIDE_CLAUDE_CODE_BIN set it first records the transcripts again with
// the real CLI against the model simulator:
//
//	TALKIDE_CLAUDE_CODE_BIN=$(./scripts/claude-code.sh) go test ./internal/harness/claudecode -run Golden -update
var update = flag.Bool("update", false, "record the CLI transcripts again (with TALKIDE_CLAUDE_CODE_BIN) and rewrite the golden files")

const transcriptDir = "testdata/transcripts"

// scenarios are the recorded turns, in the order they run in one
// conversation; "restart" closes the harness before the turn, so that it
// runs in a CLI started with --resume.
var scenarios = []struct {
	name, text string
	restart    bool
	maxTurns   int
}{
	{name: "text", text: "hello from the recorder"},
	{name: "tool", text: `Please run it. [[tool:Bash {"command":"echo hello-from-bash"}]]`},
	{name: "two_tools", text: `Two at once. [[tool:Bash {"command":"echo one"}]] [[tool:Bash {"command":"echo two; exit 3"}]]`},
	{name: "write", text: `[[tool:Write {"file_path":"WORKSPACE/notes.txt","content":"hello\n"}]]`},
	{name: "resumed", text: "after the restart", restart: true},
	{name: "task", text: `Delegate this. [[tool:Agent {"description":"look around","subagent_type":"general-purpose","run_in_background":false,"prompt":"please [[tool:Bash {\"command\":\"echo from-the-sub-agent\"}]]"}]]`},
	{name: "max_turns", text: `loop [[tool:Bash {"command":"echo again"}]]`, restart: true, maxTurns: 1},
	{name: "api_error", text: `fail please [[error:400]]`},
}

// record runs the scenarios with the real CLI and writes one transcript
// file of raw stdout lines per turn, with the temporary paths replaced by
// WORKSPACE and SESSION.
func record(t *testing.T, bin string) {
	sim := newSimulator(t)
	s := newSession(t, "rec")
	// The CLI runs in the sandbox, which lets it connect only to the ports
	// of the worker's proxies: here the simulator stands for them.
	u, err := url.Parse(sim.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	s.jail.Ports = append(s.jail.Ports, port)
	var mu bytes.Buffer
	var h *Harness
	newHarness := func(maxTurns int) {
		o := sim.options()
		o.MaxTurns = maxTurns
		var err error
		if h, err = New(bin, sim.proxy(), o); err != nil {
			t.Fatal(err)
		}
		h.trace = func(_ string, line []byte) { mu.Write(line); mu.WriteByte('\n') }
	}
	newHarness(0)
	for _, sc := range scenarios {
		if sc.restart {
			h.Close()
			newHarness(sc.maxTurns)
		}
		mu.Reset()
		text := strings.ReplaceAll(sc.text, "WORKSPACE", s.ws)
		_, err := runTurn(t, h, s, text)
		t.Logf("%s: %v", sc.name, err)
		out := strings.ReplaceAll(mu.String(), s.ws, "WORKSPACE")
		out = strings.ReplaceAll(out, s.dir, "SESSION")
		if err := os.WriteFile(filepath.Join(transcriptDir, sc.name+".jsonl"), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h.Close()
}

// golden is what the mapper makes of one transcript.
type golden struct {
	Events  []contract.Event      `json:"events"`
	Reports []contract.Report     `json:"reports"`
	Records []json.RawMessage     `json:"transcript"`
	Result  *harness.Result       `json:"result,omitempty"`
	Failure *contract.TurnFailure `json:"failure,omitempty"`
}

// mapTranscript feeds a transcript's lines to a mapper with a clock that
// moves 5 ms per reading. Not a fakeclock.Clock: the golden files' durations
// come from the mapper's own readings, which no test step could move
// between, and the mapper runs on this goroutine alone.
func mapTranscript(t *testing.T, data []byte) golden {
	var g golden
	clock := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tr := &harness.MemTranscript{}
	turn := &harness.Turn{
		ConversationID: "rec", TurnID: "t1", Transcript: tr,
		Emit:   func(ev contract.Event) { g.Events = append(g.Events, ev) },
		Report: func(r contract.Report) { g.Reports = append(g.Reports, r) },
	}
	m := newMapper(turn, func() time.Time { clock = clock.Add(5 * time.Millisecond); return clock }, slog.New(slog.DiscardHandler), 200)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, DefaultMaxLineBytes)
	for sc.Scan() {
		done, res, err := m.handle(sc.Bytes())
		if !done {
			continue
		}
		if err != nil {
			var te *harness.TurnError
			if !errors.As(err, &te) {
				t.Fatalf("the turn failed with %T %v, want a *harness.TurnError", err, err)
			}
			f := harness.Failure(err)
			g.Failure = &f
		} else {
			g.Result = &res
		}
		break
	}
	g.Records, _ = tr.Records()
	return g
}

func TestGoldenTranscripts(t *testing.T) {
	if *update {
		if bin := os.Getenv("TALKIDE_CLAUDE_CODE_BIN"); bin != "" {
			record(t, bin)
		} else {
			t.Log("TALKIDE_CLAUDE_CODE_BIN is unset: the transcripts are kept, only the golden files are rewritten")
		}
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(transcriptDir, sc.name+".jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.MarshalIndent(mapTranscript(t, data), "", "  ")
			got = append(got, '\n')
			goldenfile.Check(t, filepath.Join(transcriptDir, sc.name+".golden.json"), got, *update, "mapping of "+sc.name+".jsonl")
		})
	}
}

// TestSubAgentInterrupted: a turn stopped while a sub-agent's tool call
// runs finishes both calls, the sub-agent's under its Agent call, and the
// session transcript answers only the main agent's call: the sub-agent's
// never was in it.
func TestSubAgentInterrupted(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(transcriptDir, "task.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var events []contract.Event
	tr := &harness.MemTranscript{}
	turn := &harness.Turn{
		ConversationID: "rec", TurnID: "t1", Transcript: tr,
		Emit:   func(ev contract.Event) { events = append(events, ev) },
		Report: func(contract.Report) {},
	}
	m := newMapper(turn, time.Now, slog.New(slog.DiscardHandler), 200)
	var agentID, bashID string
	for line := range bytes.Lines(data) {
		var l cliLine
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatal(err)
		}
		if l.Type == "user" && l.ParentToolUseID != nil && bytes.Contains(line, []byte(`"tool_result"`)) {
			break // the sub-agent's Bash call never answers
		}
		if done, _, err := m.handle(line); done || err != nil {
			t.Fatalf("the turn ended early: %v", err)
		}
	}
	m.interrupted()
	for _, ev := range events {
		if ev.Kind != contract.KindToolStarted {
			continue
		}
		if ev.ParentToolUseID == "" {
			agentID = ev.Tool.ID
		} else {
			bashID = ev.Tool.ID
			if ev.Tool.Name != "Bash" {
				t.Errorf("the sub-agent's call is %q, want Bash", ev.Tool.Name)
			}
		}
	}
	if agentID == "" || bashID == "" {
		t.Fatalf("want an Agent call and a sub-agent Bash call, got %+v", events)
	}
	finished := map[string]string{}
	for _, ev := range events {
		if ev.Kind == contract.KindToolFinished {
			if !ev.Tool.IsError {
				t.Errorf("%s finished without an error after the interrupt", ev.Tool.ID)
			}
			finished[ev.Tool.ID] = ev.ParentToolUseID
		}
	}
	if p, ok := finished[bashID]; !ok || p != agentID {
		t.Errorf("the sub-agent's call finished %v under %q, want under %q", ok, p, agentID)
	}
	if p, ok := finished[agentID]; !ok || p != "" {
		t.Errorf("the Agent call finished %v under %q, want at the top", ok, p)
	}
	recs, _ := tr.Records()
	var b strings.Builder
	for _, r := range recs {
		b.Write(r)
	}
	all := b.String()
	if strings.Contains(all, bashID) {
		t.Errorf("the session transcript names the sub-agent's call %s: %s", bashID, all)
	}
	if !strings.Contains(all, `"tool_use_id":"`+agentID+`"`) {
		t.Errorf("the session transcript does not answer the Agent call %s: %s", agentID, all)
	}
}
