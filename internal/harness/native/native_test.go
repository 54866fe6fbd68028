package native

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/anthropicsim"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/sandbox"
	"github.com/talkide/platform/internal/sandbox/sandboxtest"
)

const simKey = "sk-ant-native-test"

// sink collects what a turn emits and reports. onEvent, when set, runs in
// the harness's goroutine for every event, after it was recorded.
type sink struct {
	mu      sync.Mutex
	events  []contract.Event  // guarded by mu
	reports []contract.Report // guarded by mu
	onEvent func(contract.Event)
}

func (s *sink) emit(ev contract.Event) {
	s.mu.Lock()
	s.events = append(s.events, ev)
	s.mu.Unlock()
	if s.onEvent != nil {
		s.onEvent(ev)
	}
}

func (s *sink) report(r contract.Report) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reports = append(s.reports, r)
}

func (s *sink) Events() []contract.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]contract.Event(nil), s.events...)
}

// kinds lists event kinds with runs of text.delta collapsed into one.
func kinds(evs []contract.Event) []string {
	var out []string
	for _, ev := range evs {
		if ev.Kind == contract.KindTextDelta && len(out) > 0 && out[len(out)-1] == ev.Kind {
			continue
		}
		out = append(out, ev.Kind)
	}
	return out
}

// fixture is a harness talking to a simulator over loopback, with one
// conversation's transcript and workspace.
type fixture struct {
	h          *Harness
	sim        *anthropicsim.Simulator
	transcript *harness.MemTranscript
	workspace  string
	jail       *sandbox.Jail
}

// newFixture starts a simulator behind an httptest server. wrap, when not
// nil, wraps the simulator's handler.
func newFixture(t *testing.T, opts *Options, wrap func(http.Handler) http.Handler) *fixture {
	t.Helper()
	sim := anthropicsim.New(simKey, nil)
	var h http.Handler = sim
	if wrap != nil {
		h = wrap(sim)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	client := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey(simKey), option.WithMaxRetries(0))
	ws := filepath.Join(t.TempDir(), "ws")
	return &fixture{
		h:          New(client, opts),
		sim:        sim,
		transcript: &harness.MemTranscript{},
		workspace:  ws,
		jail:       sandboxtest.Jail(t, ws),
	}
}

func (f *fixture) turn(text string, s *sink) *harness.Turn {
	return &harness.Turn{
		ConversationID: "conv-1",
		TurnID:         "t_1",
		Text:           text,
		Workspace:      f.workspace,
		Transcript:     f.transcript,
		Emit:           s.emit,
		Report:         s.report,
		Jail:           f.jail,
	}
}

// run runs one turn with a bounded context and returns its outcome.
func (f *fixture) run(t *testing.T, text string, s *sink) (harness.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return f.h.RunTurn(ctx, f.turn(text, s))
}

func (f *fixture) records(t *testing.T) []json.RawMessage {
	t.Helper()
	recs, _ := f.transcript.Records()
	return recs
}

// lastRequestMessages returns the messages array of the simulator's last
// request.
func (f *fixture) lastRequestMessages(t *testing.T) []json.RawMessage {
	t.Helper()
	msgs, _, err := f.sim.LastMessages()
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

func roles(t *testing.T, recs []json.RawMessage) []string {
	t.Helper()
	var out []string
	for _, r := range recs {
		var m wireMessage
		if err := json.Unmarshal(r, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m.Role)
	}
	return out
}

func TestPlainTextTurn(t *testing.T) {
	f := newFixture(t, nil, nil)
	s := &sink{}
	res, err := f.run(t, "hello there", s)
	if err != nil {
		t.Fatalf("RunTurn: %v", err)
	}
	if res.StopReason != "end_turn" || res.ModelCalls != 1 {
		t.Errorf("result %+v", res)
	}
	evs := s.Events()
	if diff := cmp.Diff([]string{contract.KindTextDelta, contract.KindMessage, contract.KindUsage}, kinds(evs)); diff != "" {
		t.Fatalf("event kinds (-want +got):\n%s", diff)
	}
	var deltas strings.Builder
	for _, ev := range evs {
		if ev.Kind == contract.KindTextDelta {
			deltas.WriteString(ev.Text)
		}
	}
	const want = "[simulator] messages=1 you said: hello there"
	msg := evs[len(evs)-2]
	if deltas.String() != want || msg.Text != want {
		t.Errorf("deltas %q, message %q, want %q", deltas.String(), msg.Text, want)
	}
	u := evs[len(evs)-1].Usage
	if u == nil || u.InputTokens == 0 || u.OutputTokens == 0 || u.Model != DefaultModel {
		t.Errorf("usage %+v", u)
	}
	if len(s.reports) != 1 || s.reports[0].Kind != contract.ReportUsage || s.reports[0].IdempotencyKey == "" {
		t.Errorf("reports %+v", s.reports)
	}

	recs := f.records(t)
	if diff := cmp.Diff([]string{"user", "assistant"}, roles(t, recs)); diff != "" {
		t.Fatalf("transcript roles (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(recs[0]), "hello there") || !strings.Contains(string(recs[1]), want) {
		t.Errorf("transcript %s", recs)
	}
	validateHistory(t, recs)
}

func TestToolTurnWritesFile(t *testing.T) {
	f := newFixture(t, nil, nil)
	s := &sink{}
	res, err := f.run(t, `Write it. [[tool:Write {"file_path":"a.txt","content":"x"}]]`, s)
	if err != nil {
		t.Fatalf("RunTurn: %v", err)
	}
	if res.StopReason != "end_turn" || res.ModelCalls != 2 || len(f.sim.Requests()) != 2 {
		t.Errorf("result %+v after %d model requests", res, len(f.sim.Requests()))
	}
	b, err := os.ReadFile(filepath.Join(f.workspace, "a.txt"))
	if err != nil || string(b) != "x" {
		t.Fatalf("a.txt = %q, %v", b, err)
	}
	evs := s.Events()
	want := []string{
		contract.KindTextDelta, contract.KindMessage, contract.KindUsage, // the lead text and the tool call
		contract.KindToolStarted, contract.KindToolFinished,
		contract.KindTextDelta, contract.KindMessage, contract.KindUsage,
	}
	if diff := cmp.Diff(want, kinds(evs)); diff != "" {
		t.Fatalf("event kinds (-want +got):\n%s", diff)
	}
	var started, finished *contract.ToolEvent
	for _, ev := range evs {
		switch ev.Kind {
		case contract.KindToolStarted:
			started = ev.Tool
		case contract.KindToolFinished:
			finished = ev.Tool
		}
	}
	if started.Name != "Write" || started.ID == "" || !strings.Contains(string(started.Input), `"a.txt"`) {
		t.Errorf("tool.started %+v", started)
	}
	if finished.ID != started.ID || finished.IsError {
		t.Errorf("tool.finished %+v", finished)
	}
	if len(s.reports) != 3 {
		t.Errorf("want 2 usage and 1 tool_use report, got %+v", s.reports)
	}
	recs := f.records(t)
	if diff := cmp.Diff([]string{"user", "assistant", "user", "assistant"}, roles(t, recs)); diff != "" {
		t.Fatalf("transcript roles (-want +got):\n%s", diff)
	}
	validateHistory(t, recs)
}

// cancelOn returns a sink that cancels the turn at the first event of kind.
func cancelOn(kind string, cancel context.CancelFunc) *sink {
	var once sync.Once
	return &sink{onEvent: func(ev contract.Event) {
		if ev.Kind == kind {
			once.Do(cancel)
		}
	}}
}

func TestInterrupt(t *testing.T) {
	tests := map[string]struct {
		text     string
		cancelOn string
		// wantRoles is the transcript after the interrupted turn.
		wantRoles []string
	}{
		"during a long Bash call": {
			text:      `[[tool:Bash {"command":"sleep 30"}]]`,
			cancelOn:  contract.KindToolStarted,
			wantRoles: []string{"user", "assistant", "user"},
		},
		"while text streams": {
			text:      "slowly please [[sleep:200]]",
			cancelOn:  contract.KindTextDelta,
			wantRoles: []string{"user", "assistant"}, // the text that had arrived
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, nil, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s := cancelOn(tc.cancelOn, cancel)
			start := time.Now()
			_, err := f.h.RunTurn(ctx, f.turn(tc.text, s))
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("RunTurn = %v, want context.Canceled", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("RunTurn took %v after the interruption", d)
			}
			if got := harness.Failure(err); got.Code != contract.FailInterrupted {
				t.Errorf("failure %+v", got)
			}
			recs := f.records(t)
			if diff := cmp.Diff(tc.wantRoles, roles(t, recs)); diff != "" {
				t.Fatalf("transcript roles (-want +got):\n%s", diff)
			}
			validateHistory(t, recs)
			last := string(recs[len(recs)-1])
			switch tc.cancelOn {
			case contract.KindToolStarted:
				var m wireMessage
				_ = json.Unmarshal(recs[len(recs)-1], &m)
				if len(m.Content) != 1 || !m.Content[0].IsError || !strings.Contains(string(m.Content[0].Content), "interrupted") {
					t.Errorf("tool result after the interruption: %s", last)
				}
			case contract.KindTextDelta:
				// The transcript keeps exactly the text the user saw.
				var seen strings.Builder
				for _, ev := range s.Events() {
					if ev.Kind == contract.KindTextDelta {
						seen.WriteString(ev.Text)
					}
				}
				var m wireMessage
				_ = json.Unmarshal(recs[len(recs)-1], &m)
				if len(m.Content) != 1 || m.Content[0].Type != "text" || m.Content[0].Text == "" || m.Content[0].Text != seen.String() {
					t.Errorf("partial assistant message %s, want the streamed text %q", last, seen.String())
				}
			}

			// The next turn works and sends a valid history.
			res, err := f.run(t, "are you still there?", &sink{})
			if err != nil || res.StopReason != "end_turn" {
				t.Fatalf("next turn: %+v, %v", res, err)
			}
			sent := f.lastRequestMessages(t)
			validateHistory(t, sent)
			if !strings.Contains(string(sent[len(sent)-1]), "are you still there?") {
				t.Errorf("last message sent %s", sent[len(sent)-1])
			}
			validateHistory(t, f.records(t))
		})
	}
}

func TestModelErrors(t *testing.T) {
	tests := map[string]struct {
		status    int
		code      string
		retryable bool
	}{
		"rate limited":   {429, contract.FailRateLimited, true},
		"bad request":    {400, contract.FailModelError, false},
		"unauthorized":   {401, contract.FailAuth, false},
		"forbidden":      {403, contract.FailAuth, false},
		"overloaded":     {529, contract.FailOverloaded, true},
		"internal error": {500, contract.FailModelError, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, nil, nil)
			_, err := f.run(t, "fail [[error:"+strconv.Itoa(tc.status)+"]]", &sink{})
			var te *harness.TurnError
			if !errors.As(err, &te) {
				t.Fatalf("RunTurn = %v, want a *harness.TurnError", err)
			}
			if te.Code != tc.code || te.Retryable != tc.retryable || te.HTTPStatus != tc.status {
				t.Errorf("TurnError code %q retryable %v status %d, want %q %v %d", te.Code, te.Retryable, te.HTTPStatus, tc.code, tc.retryable, tc.status)
			}
			if f := harness.Failure(err); f.Code != tc.code || f.Retryable != tc.retryable {
				t.Errorf("Failure %+v", f)
			}
			if strings.Contains(te.Message, simKey) {
				t.Errorf("message %q reveals the API key", te.Message)
			}
			validateHistory(t, f.records(t))
			// The failed turn's message stays in the transcript; the next
			// turn's message is merged with it into one user message.
			_, _ = f.run(t, "try again", &sink{})
			sent := f.lastRequestMessages(t)
			if len(sent) != 1 || !strings.Contains(string(sent[0]), "fail [[error:") || !strings.Contains(string(sent[0]), "try again") {
				t.Errorf("next turn sent %s, want both user texts merged into one message", sent)
			}
		})
	}
}

func TestMaxModelCalls(t *testing.T) {
	f := newFixture(t, &Options{MaxModelCalls: 1}, nil)
	res, err := f.run(t, `[[tool:Write {"file_path":"b.txt","content":"y"}]]`, &sink{})
	var te *harness.TurnError
	if !errors.As(err, &te) || te.Code != contract.FailMaxTurns {
		t.Fatalf("RunTurn = %v, want %s", err, contract.FailMaxTurns)
	}
	if res.ModelCalls != 1 || len(f.sim.Requests()) != 1 {
		t.Errorf("%d model calls, %d requests; want 1", res.ModelCalls, len(f.sim.Requests()))
	}
	recs := f.records(t)
	validateHistory(t, recs)
	if _, err := f.run(t, "go on", &sink{}); err != nil {
		t.Fatalf("next turn: %v", err)
	}
	validateHistory(t, f.lastRequestMessages(t))
}

// offerExtraTool makes every request offer one more tool than the harness
// has, so that the simulator calls a tool the harness does not know.
func offerExtraTool(name string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			var req map[string]json.RawMessage
			if err := json.Unmarshal(body, &req); err == nil {
				var tools []json.RawMessage
				_ = json.Unmarshal(req["tools"], &tools)
				tools = append(tools, json.RawMessage(`{"name":"`+name+`","description":"x","input_schema":{"type":"object"}}`))
				req["tools"], _ = json.Marshal(tools)
				body, _ = json.Marshal(req)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			next.ServeHTTP(w, r)
		})
	}
}

func TestUnknownTool(t *testing.T) {
	f := newFixture(t, nil, offerExtraTool("Teleport"))
	s := &sink{}
	res, err := f.run(t, `[[tool:Teleport {"to":"mars"}]]`, s)
	if err != nil || res.ModelCalls != 2 {
		t.Fatalf("RunTurn = %+v, %v", res, err)
	}
	var finished *contract.ToolEvent
	for _, ev := range s.Events() {
		if ev.Kind == contract.KindToolFinished {
			finished = ev.Tool
		}
	}
	if finished == nil || !finished.IsError || !strings.Contains(finished.Output, `no tool named "Teleport"`) || !strings.Contains(finished.Output, "Bash") {
		t.Fatalf("tool.finished %+v", finished)
	}
	recs := f.records(t)
	validateHistory(t, recs)
	var m wireMessage
	_ = json.Unmarshal(recs[2], &m)
	if len(m.Content) != 1 || m.Content[0].Type != "tool_result" || !m.Content[0].IsError {
		t.Errorf("tool result %s", recs[2])
	}
	last := s.Events()[len(s.Events())-2]
	if last.Kind != contract.KindMessage || !strings.Contains(last.Text, "(error) There is no tool named") {
		t.Errorf("the model did not see the error: %+v", last)
	}
}

func TestResumeRepairsDanglingToolUse(t *testing.T) {
	f := newFixture(t, nil, nil)
	// A crash between the model's tool call and its result.
	for _, r := range []string{userText("start"), msg("assistant", useBlock("toolu_crashed"))} {
		if err := f.transcript.Append(json.RawMessage(r)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.run(t, "continue", &sink{}); err != nil {
		t.Fatalf("RunTurn: %v", err)
	}
	sent := f.lastRequestMessages(t)
	validateHistory(t, sent)
	recs := f.records(t)
	validateHistory(t, recs)
	if !strings.Contains(string(recs[2]), "toolu_crashed") || !strings.Contains(string(recs[2]), `"is_error":true`) {
		t.Errorf("the fix was not persisted: %s", recs[2])
	}
}

// Bash runs through the sandbox, with this test binary as the helper.
func TestMain(m *testing.M) { sandboxtest.Main(m) }
