package controlplane_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/observe"
)

// The words of a report that must never be on a span.
const (
	replyWords    = "reply-words-never-on-a-span"
	activityWords = "activity-words-never-on-a-span"
)

// workerSpans are the spans a worker made reports under, all ended before
// the reports arrive: the turn, one of its tool calls, and a turn the
// worker's sampler dropped.
type workerSpans struct {
	turn, tool, unsampled trace.SpanContext
}

func startWorkerSpans(t *testing.T) workerSpans {
	// The worker's own provider, exporting nowhere: only the
	// control-plane's spans are under test.
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	tr := tp.Tracer("worker")
	ctx, turn := tr.Start(context.Background(), "turn")
	_, tool := tr.Start(ctx, "tool Bash")
	tool.End()
	turn.End()
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, // no sampled flag
	})
	return workerSpans{turn: turn.SpanContext(), tool: tool.SpanContext(), unsampled: unsampled}
}

func traceparentOf(sc trace.SpanContext) string {
	return observe.Traceparent(trace.ContextWithSpanContext(context.Background(), sc))
}

// reportsWithTraces is a batch of every kind, each report with the
// traceparent named by its key.
func reportsWithTraces(ws workerSpans) []contract.Report {
	usage := usageReport("demo/usage-1", "demo")
	usage.Traceparent = traceparentOf(ws.turn)
	tool := contract.Report{IdempotencyKey: "demo/tool-1", Kind: contract.ReportToolUse, ConversationID: "demo", TurnID: "t_1", Time: start,
		Tool: &contract.ToolReport{ID: "toolu_1", Name: "Bash", DurationMS: 4}, Traceparent: traceparentOf(ws.tool)}
	ended := contract.Report{IdempotencyKey: "demo/t_1/turn-ended", Kind: contract.ReportTurnEnded, ConversationID: "demo", TurnID: "t_1", Time: start,
		Reply: &contract.TurnReply{Text: replyWords}, Traceparent: traceparentOf(ws.turn)}
	malformed := contract.Report{IdempotencyKey: "demo/r-malformed", Kind: contract.ReportActivity, ConversationID: "demo", Time: start,
		Activity: activityWords, Traceparent: "00-zz-yy-01"}
	// Well formed for a later version of the format, which allows more
	// fields, but longer than the control-plane reads.
	oversized := usageReport("demo/usage-oversized", "demo")
	oversized.Traceparent = "01" + traceparentOf(ws.turn)[2:] + "-" + strings.Repeat("a", contract.MaxTraceparent)
	unsampled := usageReport("demo/usage-unsampled", "demo")
	unsampled.Traceparent = traceparentOf(ws.unsampled)
	return []contract.Report{usage, tool, ended, malformed, oversized, unsampled}
}

// sendReports sends rs signed as env's worker and returns the answer.
func (h *harness) sendReports(rs []contract.Report) contract.ReportAck {
	h.t.Helper()
	body := batch(h.t, rs...)
	resp, data := h.send(h.reportRequest(h.reportSigner(env), body), body)
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("reports: status %d: %s", resp.StatusCode, data)
	}
	var ack contract.ReportAck
	decodeJSON(h.t, data, &ack)
	return ack
}

// Each report stored is a span in the trace of the turn or tool call it
// is about, however long after that span ended it arrives; a report whose
// traceparent the control-plane cannot read is stored all the same, with a
// span of its own; a report of a turn the worker did not sample has none;
// a duplicate records no second span.
func TestReportSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	h := newHarness(t, harnessOptions{tracer: tp})
	h.insertConversation("demo", user, env)
	ws := startWorkerSpans(t)
	rs := reportsWithTraces(ws)

	if got, want := h.sendReports(rs), (contract.ReportAck{Accepted: len(rs)}); got != want {
		t.Fatalf("ack %+v, want %+v", got, want)
	}
	type span struct {
		Name   string
		Parent trace.SpanID // zero: a root
		Trace  trace.TraceID
	}
	var got []span
	for _, s := range exp.GetSpans() {
		sp := span{Name: s.Name, Trace: s.SpanContext.TraceID()}
		if s.Parent.IsValid() {
			sp.Parent = s.Parent.SpanID()
			if !s.Parent.IsRemote() {
				t.Errorf("span %s: a local parent %v", s.Name, s.Parent)
			}
		}
		if sp.Parent == (trace.SpanID{}) {
			sp.Trace = trace.TraceID{} // a new trace's id is random
		}
		got = append(got, sp)
		if s.SpanKind != trace.SpanKindConsumer {
			t.Errorf("span %s is of kind %v, want consumer", s.Name, s.SpanKind)
		}
		attrs := map[string]string{}
		for _, kv := range s.Attributes {
			attrs[string(kv.Key)] = kv.Value.Emit()
			if strings.Contains(kv.Value.Emit(), "never-on-a-span") {
				t.Errorf("span %s holds a report's text: %s=%s", s.Name, kv.Key, kv.Value.Emit())
			}
		}
		kind := strings.TrimPrefix(s.Name, "report ")
		want := map[string]string{"talkide.report.kind": kind, "talkide.tenant": tenant, "talkide.env": env,
			"talkide.conversation": "demo", "talkide.turn": "t_1"}
		if kind == contract.ReportActivity {
			delete(want, "talkide.turn")
		}
		if diff := cmp.Diff(want, attrs); diff != "" {
			t.Errorf("span %s attributes (-want +got):\n%s", s.Name, diff)
		}
		if s.StartTime.After(s.EndTime) {
			t.Errorf("span %s ends before it starts", s.Name)
		}
	}
	want := []span{
		{"report usage", ws.turn.SpanID(), ws.turn.TraceID()},
		{"report tool_use", ws.tool.SpanID(), ws.tool.TraceID()},
		{"report turn_ended", ws.turn.SpanID(), ws.turn.TraceID()},
		{Name: "report activity"}, // malformed: a root
		{Name: "report usage"},    // oversized: a root
		// unsampled: none
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spans (-want +got):\n%s", diff)
	}
	for _, r := range h.storedReports("demo") {
		if r.Traceparent != "" {
			t.Errorf("report %s stored with its traceparent %q", r.IdempotencyKey, r.Traceparent)
		}
	}

	// The batch again, then one new report beside an old one and itself
	// twice: one span more.
	exp.Reset()
	if got, want := h.sendReports(rs), (contract.ReportAck{Duplicates: len(rs)}); got != want {
		t.Errorf("resent: ack %+v, want %+v", got, want)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Errorf("a resent batch recorded %d spans", n)
	}
	next := usageReport("demo/usage-2", "demo")
	next.Traceparent = traceparentOf(ws.turn)
	if got, want := h.sendReports([]contract.Report{rs[1], next, next}), (contract.ReportAck{Accepted: 1, Duplicates: 2}); got != want {
		t.Errorf("partly new: ack %+v, want %+v", got, want)
	}
	if spans := exp.GetSpans(); len(spans) != 1 || spans[0].Name != "report usage" || spans[0].Parent.SpanID() != ws.turn.SpanID() {
		t.Errorf("partly new: spans %v, want the new usage report's alone", spans.Snapshots())
	}
}

// Without a TracerProvider the control-plane records no span of a report,
// not even through OpenTelemetry's global provider, and takes every
// report, whatever its traceparent.
func TestReportsUntraced(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	global := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(global) })

	h := demoHarness(t)
	rs := reportsWithTraces(startWorkerSpans(t))
	if got, want := h.sendReports(rs), (contract.ReportAck{Accepted: len(rs)}); got != want {
		t.Fatalf("ack %+v, want %+v", got, want)
	}
	if spans := exp.GetSpans(); len(spans) != 0 {
		t.Errorf("tracing off recorded %v", spans.Snapshots())
	}
	stored := h.storedReports("demo")
	if len(stored) != len(rs) {
		t.Errorf("%d reports stored, want %d", len(stored), len(rs))
	}
	for _, r := range stored {
		if r.Traceparent != "" {
			t.Errorf("report %s stored with its traceparent %q", r.IdempotencyKey, r.Traceparent)
		}
	}
}
