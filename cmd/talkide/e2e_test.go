package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/kubetest"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/roundtrip"
	"github.com/talkide/platform/internal/store"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/sandbox"
	"github.com/talkide/platform/internal/sse"
)

// api calls the browser API and decodes the JSON answer.
func api(t testing.TB, method, url string, in, out any) int {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, body)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, data := roundtrip.Do(t, req)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal([]byte(data), out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, url, data, err)
		}
	}
	return resp.StatusCode
}

// streamed is one SSE event as the browser received it.
type streamed struct {
	id string
	ev contract.Event
}

// readStream follows a conversation's browser stream from lastEventID until
// stop says so, returning every event with its SSE id.
func readStream(t testing.TB, base, conv string, lastEventID int64, stop func(contract.Event) bool) []streamed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/conversations/"+conv+"/stream", nil)
	if lastEventID > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(lastEventID, 10))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := sse.NewReader(resp.Body, 1<<20)
	var got []streamed
	for {
		e, err := r.Next()
		if err != nil {
			t.Fatalf("stream ended before the expected event (after %d events): %v", len(got), err)
		}
		var ev contract.Event
		if err := json.Unmarshal(e.Data, &ev); err != nil {
			t.Fatalf("event data: %v", err)
		}
		if e.Event != ev.Kind {
			t.Errorf("SSE event name %q, kind %q", e.Event, ev.Kind)
		}
		got = append(got, streamed{id: e.ID, ev: ev})
		if stop(ev) {
			return got
		}
	}
}

func turnEnded(turnID string) func(contract.Event) bool {
	return func(ev contract.Event) bool { return ev.TurnID == turnID && contract.Terminal(ev.Kind) }
}

func createConversation(t testing.TB, base string) contractView {
	t.Helper()
	var c contractView
	if st := api(t, http.MethodPost, base+"/api/conversations", map[string]string{"title": "e2e"}, &c); st != http.StatusCreated {
		t.Fatalf("create conversation: status %d", st)
	}
	return c
}

type contractView struct {
	ID    string                 `json:"id"`
	State *contract.SessionState `json:"state"`
}

func send(t testing.TB, base, conv, text string) contract.SendMessageResponse {
	t.Helper()
	var r contract.SendMessageResponse
	if st := api(t, http.MethodPost, base+"/api/conversations/"+conv+"/messages", map[string]string{"text": text}, &r); st != http.StatusAccepted {
		t.Fatalf("send: status %d", st)
	}
	return r
}

// checkSequence asserts that SSE ids equal the events' seqs and run without
// gaps from first.
func checkSequence(t *testing.T, got []streamed, first int64) {
	t.Helper()
	for i, s := range got {
		want := first + int64(i)
		if s.ev.Seq != want || s.id != strconv.FormatInt(want, 10) {
			t.Fatalf("event %d: id %q seq %d, want %d (kind %s)", i, s.id, s.ev.Seq, want, s.ev.Kind)
		}
	}
}

// toolEvents are the tool.started and the tool.finished event of a turn
// that calls one tool; nil where there is none.
func toolEvents(got []streamed) (started, finished *contract.ToolEvent) {
	for _, s := range got {
		switch s.ev.Kind {
		case contract.KindToolStarted:
			started = s.ev.Tool
		case contract.KindToolFinished:
			finished = s.ev.Tool
		}
	}
	return started, finished
}

// firstToolTurn sends the first message of conversation conv, one whose
// turn calls a tool once, and checks the conversation's events up to the
// turn's end: in sequence from the session's creation, and of the kinds
// such a turn has, whichever harness runs it.
func firstToolTurn(t *testing.T, base, conv, text string) []streamed {
	t.Helper()
	r := send(t, base, conv, text)
	got := readStream(t, base, conv, 0, turnEnded(r.TurnID))
	checkSequence(t, got, 1)
	want := []string{
		contract.KindSessionCreated, contract.KindNotice,
		contract.KindUserMessage, contract.KindTurnStarted,
		contract.KindMessage, contract.KindUsage,
		contract.KindToolStarted, contract.KindToolFinished,
		contract.KindMessage, contract.KindUsage,
		contract.KindTurnFinished,
	}
	if diff := cmp.Diff(want, kinds(got)); diff != "" {
		t.Fatalf("event kinds (-want +got):\n%s", diff)
	}
	return got
}

// toolTurnRecorded checks that the turn of firstToolTurn ended normally
// after its two model calls, and returns the usage records the gateway
// keeps for the conversation once it has written them (it does in the
// background: Flush waits for them).
func toolTurnRecorded(t *testing.T, st *roles.Dev, conv string, got []streamed) []store.UsageRecord {
	t.Helper()
	last := got[len(got)-1].ev
	if last.Finish == nil || last.Finish.StopReason != "end_turn" || last.Finish.ModelCalls != 2 {
		t.Errorf("turn.finished = %+v", last.Finish)
	}
	if err := st.ControlPlane.Gateway.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	usage, err := st.ControlPlane.Store.ListUsage(t.Context(), conv)
	if err != nil {
		t.Fatal(err)
	}
	return usage
}

func kinds(got []streamed) []string {
	var out []string
	for _, s := range got {
		if s.ev.Kind != contract.KindTextDelta && s.ev.Kind != contract.KindToolOutput {
			out = append(out, s.ev.Kind)
		}
	}
	return out
}

func TestEndToEndBashTurn(t *testing.T) {
	st, _ := startTestStack(t)
	base := st.Info.ControlPlane
	var c contractView // untitled: the control-plane names it
	if code := api(t, http.MethodPost, base+"/api/conversations", map[string]string{}, &c); code != http.StatusCreated {
		t.Fatalf("create conversation: status %d", code)
	}

	got := firstToolTurn(t, base, c.ID, `Please run it. [[tool:Bash {"command":"echo hello-from-bash; echo second line"}]]`)
	started, finished := toolEvents(got)
	var output, finalText strings.Builder
	for _, s := range got {
		switch s.ev.Kind {
		case contract.KindToolOutput:
			output.WriteString(s.ev.Tool.Output)
		case contract.KindMessage:
			finalText.Reset()
			finalText.WriteString(s.ev.Text)
		}
	}
	if started.Name != "Bash" || !strings.Contains(string(started.Input), "echo hello-from-bash") {
		t.Errorf("tool.started = %+v", started)
	}
	if !strings.Contains(output.String(), "hello-from-bash") {
		t.Errorf("tool.output chunks = %q", output.String())
	}
	if finished.IsError || finished.ID != started.ID || !strings.Contains(finished.Output, "hello-from-bash\nsecond line") {
		t.Errorf("tool.finished = %+v", finished)
	}
	if !strings.Contains(finalText.String(), "hello-from-bash") {
		t.Errorf("final text %q does not quote the tool result", finalText.String())
	}
	// The gateway recorded both model calls against this conversation,
	// and the call that named it, marked as such.
	// The title call runs beside the turn: once the title is stored it
	// has ended, and Flush (in toolTurnRecorded) writes its record.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		cv, err := st.ControlPlane.Store.GetConversation(t.Context(), c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if cv.Title != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the conversation got no title")
		}
	}
	var usage []store.UsageRecord
	titles := 0
	for _, u := range toolTurnRecorded(t, st, c.ID, got) {
		if u.Purpose == store.PurposeTitle {
			titles++
			continue
		}
		usage = append(usage, u)
	}
	if len(usage) != 2 || titles != 1 {
		t.Fatalf("usage records = %d and %d title calls, want 2 and 1", len(usage), titles)
	}
	for _, u := range usage {
		if u.InputTokens == 0 || u.OutputTokens == 0 || u.Status != 200 || u.Tenant != roles.DevTenant || u.UserID != roles.DevUser {
			t.Errorf("usage record %+v", u)
		}
	}
}

// agentRequests returns the simulator's requests but the control-plane's
// title calls, which run beside the turns.
func agentRequests(st *roles.Dev) [][]byte {
	var out [][]byte
	for _, r := range st.Simulator.Requests() {
		if !bytes.Contains(r, []byte(contract.TitlePrompt)) {
			out = append(out, r)
		}
	}
	return out
}

// lastRequestMessages returns the number of messages in the simulator's last
// request and that request's raw body.
func lastRequestMessages(t *testing.T, st *roles.Dev) (int, string) {
	t.Helper()
	reqs := agentRequests(st)
	if len(reqs) == 0 {
		t.Fatal("the simulator received no request")
	}
	var body struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(reqs[len(reqs)-1], &body); err != nil {
		t.Fatal(err)
	}
	return len(body.Messages), string(reqs[len(reqs)-1])
}

func TestWorkerRestartKeepsHistoryAndStream(t *testing.T) {
	st, _ := startTestStack(t)
	base := st.Info.ControlPlane
	c := createConversation(t, base)

	r1 := send(t, base, c.ID, "first message alpha")
	first := readStream(t, base, c.ID, 0, turnEnded(r1.TurnID))
	checkSequence(t, first, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.RestartWorker(ctx); err != nil {
		t.Fatalf("restart worker: %v", err)
	}

	r2 := send(t, base, c.ID, "second message beta")
	n, body := lastRequestMessagesAfter(t, st, r2.TurnID, base, c.ID)
	if n != 3 || !strings.Contains(body, "first message alpha") || !strings.Contains(body, "second message beta") {
		t.Fatalf("second turn sent %d messages: %s", n, body)
	}

	// A client that saw events up to the middle of the first turn
	// reconnects: it gets exactly the rest, through the restart.
	mid := first[len(first)/2].ev.Seq
	rest := readStream(t, base, c.ID, mid, turnEnded(r2.TurnID))
	checkSequence(t, rest, mid+1)
	var sawResumed bool
	for _, s := range rest {
		if s.ev.Kind == contract.KindSessionResumed {
			sawResumed = true
			if s.ev.Session.Messages != 2 {
				t.Errorf("session.resumed restored %d messages, want 2", s.ev.Session.Messages)
			}
		}
		if s.ev.Kind == contract.KindMessage && s.ev.TurnID == r2.TurnID && !strings.Contains(s.ev.Text, "messages=3") {
			t.Errorf("second reply %q does not show the full history", s.ev.Text)
		}
	}
	if !sawResumed {
		t.Error("no session.resumed event after the restart")
	}
}

// lastRequestMessagesAfter waits for turn to end, then inspects the
// simulator's last request.
func lastRequestMessagesAfter(t *testing.T, st *roles.Dev, turn, base, conv string) (int, string) {
	t.Helper()
	var state contractView
	api(t, http.MethodGet, base+"/api/conversations/"+conv, nil, &state)
	readStream(t, base, conv, state.State.LastSeq-1, func(ev contract.Event) bool {
		return ev.TurnID == turn && contract.Terminal(ev.Kind)
	})
	return lastRequestMessages(t, st)
}

func TestControlPlaneRestartReplaysExactlyTheMissedEvents(t *testing.T) {
	st, _ := startTestStack(t)
	base := st.Info.ControlPlane
	c := createConversation(t, base)
	r1 := send(t, base, c.ID, "before the redeploy")
	first := readStream(t, base, c.ID, 0, turnEnded(r1.TurnID))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.RestartControlPlane(ctx); err != nil {
		t.Fatalf("restart control-plane: %v", err)
	}
	if st.Info.ControlPlane != base {
		t.Fatalf("control-plane moved from %s to %s", base, st.Info.ControlPlane)
	}
	r2 := send(t, base, c.ID, "after the redeploy")
	seen := first[len(first)-3].ev.Seq
	rest := readStream(t, base, c.ID, seen, turnEnded(r2.TurnID))
	checkSequence(t, rest, seen+1)
	if rest[len(rest)-1].ev.Kind != contract.KindTurnFinished {
		t.Fatalf("last event %s", rest[len(rest)-1].ev.Kind)
	}
	n, _ := lastRequestMessages(t, st)
	if n != 3 {
		t.Fatalf("second turn sent %d messages, want 3", n)
	}
}

func TestChatCommandOnce(t *testing.T) {
	st, _ := startTestStack(t)
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := run(ctx, []string{"chat", "--addr", st.Info.ControlPlane, "--conversation", "chat-once", "-m", "hello chat"}, stdio{in: strings.NewReader(""), out: &out, err: &errOut})
	if err != nil {
		t.Fatalf("chat: %v (%s)", err, errOut.String())
	}
	if !strings.Contains(out.String(), "[simulator] messages=1 you said: hello chat") {
		t.Fatalf("chat printed %q", out.String())
	}
	// The same conversation again: the history grows.
	out.Reset()
	if err := run(ctx, []string{"chat", "--addr", st.Info.ControlPlane, "--conversation", "chat-once", "-m", "again"}, stdio{in: strings.NewReader(""), out: &out, err: &errOut}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "messages=3") {
		t.Fatalf("second chat printed %q", out.String())
	}
}

func TestMain(m *testing.M) {
	// The stacks the tests start sandbox their agent commands with this
	// binary as the helper.
	sandbox.RunHelper()
	// The stack reads nothing from the environment; make sure a developer's
	// key cannot leak into a test run.
	for _, k := range []string{"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN"} {
		os.Unsetenv(k)
	}
	// The Kubernetes tests share one API server, started on first use.
	code := kubetest.Run(m)
	if testBinary.dir != "" {
		os.RemoveAll(testBinary.dir)
	}
	os.Exit(code)
}

// A control-plane shutting down ends its browser streams instead of waiting
// for them until its grace period runs out; the client then reconnects.
func TestControlPlaneShutdownEndsBrowserStreams(t *testing.T) {
	st, _ := startTestStack(t)
	base := st.Info.ControlPlane
	c := createConversation(t, base)
	resp, err := http.Get(base + "/api/conversations/" + c.ID + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ended := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); ended <- err }()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.ControlPlane.Stop(ctx); err != nil {
		t.Fatalf("Shutdown with an open browser stream: %v", err)
	}
	if err := <-ended; err != nil {
		t.Fatalf("the stream did not end cleanly: %v", err)
	}
	st.ControlPlane = nil
}
