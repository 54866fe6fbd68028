package roles

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	collmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/talkide/platform/internal/build/buildtest"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/telemetry"
)

// otlpReceiver is an in-process OTLP/HTTP collector: it decodes what the
// exporters send with the protocol's own types and keeps it.
type otlpReceiver struct {
	url string

	mu      sync.Mutex
	spans   []*tracepb.Span                            // guarded by mu
	res     []*commonpb.KeyValue                       // guarded by mu: every resource attribute seen
	metrics []*collmetrics.ExportMetricsServiceRequest // guarded by mu
	posts   int                                        // guarded by mu
}

func startReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		var in colltrace.ExportTraceServiceRequest
		if !r.decode(w, req, &in) {
			return
		}
		r.mu.Lock()
		for _, rs := range in.ResourceSpans {
			r.res = append(r.res, rs.GetResource().GetAttributes()...)
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		b, _ := proto.Marshal(&colltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(b)
	})
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, req *http.Request) {
		var in collmetrics.ExportMetricsServiceRequest
		if !r.decode(w, req, &in) {
			return
		}
		r.mu.Lock()
		r.metrics = append(r.metrics, &in)
		r.mu.Unlock()
		b, _ := proto.Marshal(&collmetrics.ExportMetricsServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(b)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	r.url = "http://" + ln.Addr().String()
	return r
}

func (r *otlpReceiver) decode(w http.ResponseWriter, req *http.Request, m proto.Message) bool {
	body, err := io.ReadAll(io.LimitReader(req.Body, 16<<20))
	if err == nil {
		err = proto.Unmarshal(body, m)
	}
	r.mu.Lock()
	r.posts++
	r.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

// turn returns the spans received, by span id, and the span of turnID;
// r.mu must be held.
func (r *otlpReceiver) turn(t *testing.T, turnID string) (map[string]*tracepb.Span, *tracepb.Span) {
	t.Helper()
	byID := map[string]*tracepb.Span{}
	var turn *tracepb.Span
	for _, s := range r.spans {
		byID[hex.EncodeToString(s.SpanId)] = s
		if s.Name == "turn" && attr(s, "talkide.turn").GetStringValue() == turnID {
			turn = s
		}
	}
	if turn == nil {
		t.Fatalf("no turn span for %s among %d spans", turnID, len(r.spans))
	}
	return byID, turn
}

func attr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}

// strs is every string an attribute list holds, as key=value.
func strs(kvs []*commonpb.KeyValue) []string {
	var out []string
	var walk func(k string, v *commonpb.AnyValue)
	walk = func(k string, v *commonpb.AnyValue) {
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out = append(out, k+"="+x.StringValue)
		case *commonpb.AnyValue_ArrayValue:
			for _, e := range x.ArrayValue.Values {
				walk(k, e)
			}
		case *commonpb.AnyValue_KvlistValue:
			for _, e := range x.KvlistValue.Values {
				walk(k+"."+e.Key, e.Value)
			}
		case *commonpb.AnyValue_BytesValue:
			out = append(out, k+"="+string(x.BytesValue))
		default:
			out = append(out, fmt.Sprintf("%s=%v", k, v))
		}
	}
	for _, kv := range kvs {
		walk(kv.Key, kv.Value)
	}
	return out
}

// One turn, from the browser's request to the model and back, with a
// sandboxed command and a build, is one trace whose spans cover every
// seam, each under the right parent, with the GenAI attributes; no span
// holds the prompt, a tool's input or output, the API key or a token.
func TestTurnTrace(t *testing.T) {
	recv := startReceiver(t)
	ctx := context.Background()
	var logs bytes.Buffer
	dataDir := filepath.Join(t.TempDir(), "data")
	d, err := StartDev(ctx, DevConfig{
		DataDir: dataDir, Addr: "127.0.0.1:0",
		Agent:     AgentConfig{Sandbox: "landlock"},
		Telemetry: telemetry.Config{TracesEndpoint: recv.url + "/v1/traces", MetricsEndpoint: recv.url + "/v1/metrics"},
		TraceFile: true,
		Logger:    slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopDev(t, d)
		}
	}
	defer stop()
	base := d.Info.ControlPlane
	conv := createConversation(t, base)
	buildtest.FakeGradle(t, filepath.Join(dataDir, "workspaces", conv))
	const (
		prompt    = "secret-prompt-words"
		toolInput = "tool-input-marker"
		toolOut   = "tool-output-marker"
	)
	text := prompt + ` [[tool:Bash {"command":"echo ` + toolInput + ` >/dev/null; echo ` + toolOut + `"}]] [[tool:Build {"tasks":["test"]}]]`
	// A traceparent from outside: not continued, only linked.
	const outside = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	turnID := sendMessage(t, base, conv, text, outside)
	reply := replyOf(t, waitTurn(t, base, conv, toolOut))
	// A restarted worker resumes the session within the next turn's trace.
	if err := d.RestartWorker(ctx); err != nil {
		t.Fatal(err)
	}
	second := sendMessage(t, base, conv, "again", "")
	waitTurn(t, base, conv, "")
	identity, _ := os.ReadFile(filepath.Join(dataDir, "worker", "identity-token"))
	simKey := d.SimulatorKey()
	stop() // flushes every span and metric

	recv.mu.Lock()
	defer recv.mu.Unlock()
	byID, turnSpan := recv.turn(t, turnID)
	trace := map[string][]*tracepb.Span{}
	for _, s := range recv.spans {
		if bytes.Equal(s.TraceId, turnSpan.TraceId) {
			trace[s.Name] = append(trace[s.Name], s)
		}
	}
	one := func(name string) *tracepb.Span {
		t.Helper()
		if len(trace[name]) == 0 {
			var names []string
			for n := range trace {
				names = append(names, n)
			}
			t.Fatalf("the turn's trace has no span %q; it has %v", name, names)
		}
		return trace[name][0]
	}
	parentOf := func(s *tracepb.Span) string {
		if p := byID[hex.EncodeToString(s.ParentSpanId)]; p != nil {
			return p.Name
		}
		return ""
	}
	root := one("POST /api/conversations/{id}/messages")
	if len(root.ParentSpanId) != 0 || hex.EncodeToString(root.TraceId) == "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("the browser's traceparent was continued: parent %x trace %x", root.ParentSpanId, root.TraceId)
	}
	if len(root.Links) != 1 || hex.EncodeToString(root.Links[0].TraceId) != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("the browser's span is not linked: %v", root.Links)
	}
	for child, parent := range map[string]string{
		"worker POST /v1/sessions/{id}/messages": "POST /api/conversations/{id}/messages",
		"POST /v1/sessions/{id}/messages":        "worker POST /v1/sessions/{id}/messages",
		"turn":                                   "POST /v1/sessions/{id}/messages",
		"chat claude-sonnet-5-5":                 "turn",
		"worker token mint":                      "chat claude-sonnet-5-5",
		"gateway POST /v1/messages":              "chat claude-sonnet-5-5",
		"budget admission":                       "gateway POST /v1/messages",
		"tool Bash":                              "turn",
		"sandbox command":                        "tool Bash",
		"sandbox start":                          "sandbox command",
		"tool Build":                             "turn",
		"build":                                  "tool Build",
	} {
		if got := parentOf(one(child)); got != parent {
			t.Errorf("span %q's parent is %q, want %q", child, got, parent)
		}
	}
	// Each report of the turn the worker sent is the control-plane's span
	// in the turn's trace, under the span of what it reports on, once.
	for name, want := range map[string][]string{
		"report usage":      {"chat claude-sonnet-5-5", "chat claude-sonnet-5-5"},
		"report tool_use":   {"tool Bash", "tool Build"},
		"report turn_ended": {"turn"},
	} {
		var got []string
		for _, s := range trace[name] {
			got = append(got, parentOf(s))
			if s.Kind != tracepb.Span_SPAN_KIND_CONSUMER {
				t.Errorf("span %s is of kind %v, want consumer", name, s.Kind)
			}
			for k, want := range map[string]string{"talkide.report.kind": strings.TrimPrefix(name, "report "),
				"talkide.tenant": DevTenant, "talkide.env": DevEnv, "talkide.conversation": conv, "talkide.turn": turnID} {
				if got := attr(s, k).GetStringValue(); got != want {
					t.Errorf("span %s: %s = %q, want %q", name, k, got, want)
				}
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("the spans %q are under %q, want one under each of %q", name, got, want)
		}
	}
	if n := len(trace["chat claude-sonnet-5-5"]); n != 2 {
		t.Errorf("%d model call spans, want 2 (the tool calls, the answer)", n)
	}
	for _, s := range trace["chat claude-sonnet-5-5"] {
		for k, want := range map[string]string{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic",
			"gen_ai.system": "anthropic", "gen_ai.request.model": "claude-sonnet-5-5", "gen_ai.response.model": "claude-sonnet-5-5",
			"talkide.conversation": conv, "talkide.turn": turnID} {
			if got := attr(s, k).GetStringValue(); got != want {
				t.Errorf("model call span: %s = %q, want %q", k, got, want)
			}
		}
		if attr(s, "gen_ai.usage.input_tokens").GetIntValue() <= 0 || attr(s, "gen_ai.usage.output_tokens").GetIntValue() <= 0 {
			t.Errorf("model call span without usage: %v", strs(s.Attributes))
		}
		if attr(s, "gen_ai.usage.cache_read.input_tokens") == nil || attr(s, "gen_ai.usage.cache_creation.input_tokens") == nil {
			t.Errorf("model call span without cache usage: %v", strs(s.Attributes))
		}
		if len(attr(s, "gen_ai.response.finish_reasons").GetArrayValue().GetValues()) != 1 {
			t.Errorf("model call span without finish reasons: %v", strs(s.Attributes))
		}
	}
	gw := one("gateway POST /v1/messages")
	if attr(gw, "talkide.tenant").GetStringValue() != DevTenant || attr(gw, "gen_ai.usage.output_tokens").GetIntValue() <= 0 {
		t.Errorf("gateway span: %v", strs(gw.Attributes))
	}
	if got := attr(one("budget admission"), "talkide.budget.decision").GetStringValue(); got != "admitted" {
		t.Errorf("budget decision %q", got)
	}
	if got := attr(one("tool Bash"), "talkide.tool.outcome").GetStringValue(); got != "ok" {
		t.Errorf("Bash outcome %q", got)
	}
	if got := attr(one("build"), "talkide.build.status").GetStringValue(); got == "" {
		t.Errorf("build span without a status: %v", strs(one("build").Attributes))
	}

	var resumed *tracepb.Span
	for _, s := range recv.spans {
		if s.Name == "session resume" {
			resumed = s
		}
	}
	if resumed == nil || parentOf(resumed) != "POST /v1/sessions/{id}/messages" {
		t.Errorf("no session resume span under the second message's command")
	} else {
		for _, s := range recv.spans {
			if s.Name == "turn" && attr(s, "talkide.turn").GetStringValue() == second && !bytes.Equal(s.TraceId, resumed.TraceId) {
				t.Errorf("the session's resume is not in the trace of the turn that resumed it")
			}
		}
	}

	// Nothing secret or said, in any span of any trace, or the resources.
	noSecrets(t, recv, append(reply, prompt, toolInput, toolOut, "echo ", simKey, string(identity))...)

	// The GenAI metrics, by token type, and no conversation among their
	// attributes.
	var names []string
	types := map[string]bool{}
	for _, req := range recv.metrics {
		for _, rm := range req.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					names = append(names, m.Name)
					for _, dp := range m.GetHistogram().GetDataPoints() {
						for _, kv := range strs(dp.Attributes) {
							if strings.Contains(kv, conv) || strings.Contains(kv, turnID) {
								t.Errorf("metric %s has a conversation or turn attribute: %s", m.Name, kv)
							}
							if v, ok := strings.CutPrefix(kv, "gen_ai.token.type="); ok {
								types[v] = true
							}
						}
					}
				}
			}
		}
	}
	for _, want := range []string{"gen_ai.client.token.usage", "gen_ai.client.operation.duration", "gen_ai.client.operation.time_to_first_chunk"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("metric %s not exported (got %v)", want, names)
		}
	}
	if !types["input"] || !types["output"] {
		t.Errorf("token types %v", types)
	}

	// The log line of the turn's end carries its trace.
	if !strings.Contains(logs.String(), `"trace_id":"`+hex.EncodeToString(turnSpan.TraceId)) {
		t.Errorf("no log line names the turn's trace")
	}

	// talkide dev --trace-file kept the same trace for talkide admin trace.
	var out bytes.Buffer
	if err := telemetry.PrintTurn(&out, filepath.Join(dataDir, telemetry.TraceFileName), turnID); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"trace " + hex.EncodeToString(turnSpan.TraceId), "turn", "tool Bash", "sandbox start", "gateway POST /v1/messages", "build"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("admin trace output lacks %q:\n%s", want, out.String())
		}
	}
}

// noSecrets fails t when any span name, attribute, event, status or
// resource attribute recv holds contains one of words, a prefix of a
// platform token or capability, or an API key's.
func noSecrets(t *testing.T, recv *otlpReceiver, words ...string) {
	t.Helper()
	forbidden := []string{"tki_", "tlp_", "tka_", "tko_", "wt1.", "sk-"}
	for _, w := range words {
		if w = strings.TrimSpace(w); w != "" {
			forbidden = append(forbidden, w)
		}
	}
	var all []string
	for _, s := range recv.spans {
		all = append(all, s.Name)
		all = append(all, strs(s.Attributes)...)
		for _, e := range s.Events {
			all = append(all, e.Name)
			all = append(all, strs(e.Attributes)...)
		}
		for _, l := range s.Links {
			all = append(all, strs(l.Attributes)...)
		}
		all = append(all, s.GetStatus().GetMessage())
	}
	all = append(all, strs(recv.res)...)
	for _, v := range all {
		for _, f := range forbidden {
			if strings.Contains(v, f) {
				t.Errorf("a span holds %q: %s", f, v)
			}
		}
	}
}

// With the Claude Code harness, the CLI's model calls go through the
// local proxy: each is a span under the turn, whatever the CLI sends as
// traceparent, and the gateway's span is its child.
func TestTurnTraceClaudeCode(t *testing.T) {
	bin := os.Getenv("TALKIDE_CLAUDE_CODE_BIN")
	if bin == "" {
		t.Fatal("TALKIDE_CLAUDE_CODE_BIN is not set: run ./scripts/test.sh, or set TALKIDE_CLAUDE_CODE_BIN=$(./scripts/claude-code.sh)")
	}
	recv := startReceiver(t)
	ctx := context.Background()
	dataDir := filepath.Join(t.TempDir(), "data")
	d, err := StartDev(ctx, DevConfig{
		DataDir: dataDir, Addr: "127.0.0.1:0",
		Agent:     AgentConfig{Harness: "claude-code", ClaudeCodeBin: bin},
		Telemetry: telemetry.Config{TracesEndpoint: recv.url + "/v1/traces"},
	})
	if err != nil {
		t.Fatal(err)
	}
	const prompt = "claude-code-prompt-words"
	turnID := runTurn(t, d, prompt)
	identity, _ := os.ReadFile(filepath.Join(dataDir, "worker", "identity-token"))
	stopDev(t, d)
	recv.mu.Lock()
	defer recv.mu.Unlock()
	byID, turn := recv.turn(t, turnID)
	calls, gateways, reports := 0, 0, map[string]int{}
	for _, s := range recv.spans {
		p := byID[hex.EncodeToString(s.ParentSpanId)]
		switch {
		case strings.HasPrefix(s.Name, "report ") && attr(s, "talkide.turn").GetStringValue() == turnID:
			// This harness's calls have no spans of their own: every
			// report is about the turn.
			reports[s.Name]++
			if p != turn {
				t.Errorf("span %q is not the turn's child (parent %v)", s.Name, p.GetName())
			}
		case strings.HasPrefix(s.Name, "localproxy POST /v1/messages"):
			calls++
			if p != turn {
				t.Errorf("the CLI's call %q is not the turn's child (parent %v)", s.Name, p.GetName())
			}
		case strings.HasPrefix(s.Name, "gateway POST /v1/messages") && attr(s, "talkide.purpose").GetStringValue() == "":
			gateways++
			if p == nil || !strings.HasPrefix(p.Name, "localproxy ") || !bytes.Equal(s.TraceId, turn.TraceId) {
				t.Errorf("a gateway call outside the CLI's: parent %v", p.GetName())
			}
		}
	}
	if calls == 0 || gateways != calls {
		t.Errorf("%d calls through the local proxy, %d gateway spans", calls, gateways)
	}
	if reports["report usage"] == 0 || reports["report turn_ended"] != 1 {
		t.Errorf("the turn's report spans: %v, want usage and one turn_ended", reports)
	}
	noSecrets(t, recv, prompt, d.SimulatorKey(), string(identity))
}

// With the SDK disabled, an endpoint set or not, nothing is exported.
func TestTracingOffExportsNothing(t *testing.T) {
	recv := startReceiver(t)
	ctx := context.Background()
	d, err := StartDev(ctx, DevConfig{
		DataDir: filepath.Join(t.TempDir(), "data"), Addr: "127.0.0.1:0",
		Telemetry: telemetry.Config{Disabled: true, TracesEndpoint: recv.url + "/v1/traces", MetricsEndpoint: recv.url + "/v1/metrics"},
	})
	if err != nil {
		t.Fatal(err)
	}
	runTurn(t, d, "hello")
	stopDev(t, d)
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if recv.posts != 0 {
		t.Errorf("%d exports with the SDK disabled", recv.posts)
	}
}

// runTurn runs a turn of text in a new conversation of d and returns the
// turn's id once it has finished.
func runTurn(t *testing.T, d *Dev, text string) string {
	t.Helper()
	conv := createConversation(t, d.Info.ControlPlane)
	turnID := sendMessage(t, d.Info.ControlPlane, conv, text, "")
	waitTurn(t, d.Info.ControlPlane, conv, "")
	return turnID
}

// stopDev stops d, which exports what its telemetry still holds.
func stopDev(t *testing.T, d *Dev) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

func createConversation(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Post(base+"/api/conversations", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var conv struct{ ID string }
	json.NewDecoder(resp.Body).Decode(&conv)
	if conv.ID == "" {
		t.Fatalf("no conversation created: %s", resp.Status)
	}
	return conv.ID
}

// sendMessage sends text, with traceparent when it is not empty, and
// returns the turn's id.
func sendMessage(t *testing.T, base, conv, text, traceparent string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"text": text})
	req, _ := http.NewRequest(http.MethodPost, base+"/api/conversations/"+conv+"/messages", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if traceparent != "" {
		req.Header.Set("Traceparent", traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		TurnID string `json:"turn_id"`
	}
	json.NewDecoder(resp.Body).Decode(&r)
	if resp.StatusCode/100 != 2 || r.TurnID == "" {
		t.Fatalf("send: %s", resp.Status)
	}
	return r.TurnID
}

// waitTurn follows the conversation's events until its turn ends,
// checks that want (if any) was among them, and returns the stream as it
// read it.
func waitTurn(t *testing.T, base, conv, want string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/conversations/"+conv+"/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64<<10)
	var seen strings.Builder
	for {
		n, err := resp.Body.Read(buf)
		seen.Write(buf[:n])
		if strings.Contains(seen.String(), "turn.finished") || strings.Contains(seen.String(), "turn.failed") {
			if !strings.Contains(seen.String(), "turn.finished") || !strings.Contains(seen.String(), want) {
				t.Fatalf("the turn did not finish as expected:\n%s", seen.String())
			}
			return seen.String()
		}
		if err != nil {
			t.Fatalf("the turn did not end: %v\n%s", err, seen.String())
		}
	}
}

// replyOf is the lines of the assistant's messages in an event stream
// that are long enough to be the reply's own words (a span may well hold
// "ok" or "test").
func replyOf(t *testing.T, stream string) []string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(stream, "\n") {
		data, ok := strings.CutPrefix(l, "data: ")
		if !ok {
			continue
		}
		var ev contract.Event
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		if ev.Kind != contract.KindMessage {
			continue
		}
		for _, line := range strings.Split(ev.Text, "\n") {
			if line = strings.TrimSpace(line); len(line) >= 16 {
				lines = append(lines, line)
			}
		}
	}
	if len(lines) == 0 {
		t.Fatalf("no reply in the stream:\n%s", stream)
	}
	return lines
}
