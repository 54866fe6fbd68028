package worker

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/observe"
)

// A report carries, in the outbox, the trace context of what it is about:
// the call's span that the harness named, else the turn's; with tracing off,
// none.
func TestReportTraceparent(t *testing.T) {
	for name, traced := range map[string]bool{"on": true, "off": false} {
		t.Run(name, func(t *testing.T) {
			var opts workerOpts
			if traced {
				tp := sdktrace.NewTracerProvider()
				t.Cleanup(func() { tp.Shutdown(context.Background()) })
				opts.tracer = tp
			}
			tw := newTestWorker(t, opts)
			tw.create(t, "conv-1")
			_, sent := tw.sendMessage(t, "conv-1", "m-1", "run it")
			ft := tw.h.next(t)
			// A tool call's span, as a harness makes one under the turn.
			callCtx, call := observe.Start(ft.ctx, observe.FromContext(ft.ctx, "test"), "tool Bash")
			call.End()
			ft.Report(contract.Report{Kind: contract.ReportToolUse, IdempotencyKey: "tool-1",
				Tool: &contract.ToolReport{ID: "toolu_1", Name: "Bash"}, Traceparent: observe.Traceparent(callCtx)})
			ft.Report(contract.Report{Kind: contract.ReportActivity, Activity: "ran it"})
			ft.finish("end_turn")
			got := map[string]string{}
			for _, r := range tw.turnReports(t, ft, "conv-1", sent.TurnID) {
				got[r.Kind] = r.Traceparent
			}

			want := map[string]string{contract.ReportToolUse: "", contract.ReportActivity: "", contract.ReportTurnEnded: ""}
			if traced {
				// The harness runs the turn under the turn's span.
				turn := trace.SpanContextFromContext(ft.ctx)
				if !turn.IsSampled() {
					t.Fatal("the turn has no recorded span")
				}
				want = map[string]string{
					contract.ReportToolUse:   traceparentOf(call.SpanContext()),
					contract.ReportActivity:  traceparentOf(turn),
					contract.ReportTurnEnded: traceparentOf(turn),
				}
				if call.SpanContext().TraceID() != turn.TraceID() {
					t.Fatal("the tool call's span is not in the turn's trace")
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("traceparent by report kind (-want +got):\n%s", diff)
			}
		})
	}
}

func traceparentOf(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return "not a span"
	}
	return observe.Traceparent(trace.ContextWithSpanContext(context.Background(), sc))
}
