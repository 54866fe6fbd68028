package observe

import (
	"context"
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

const outside = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

func newProvider(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp, exp
}

// A caller from outside starts no span of ours under its own: a new root,
// linked to what it sent when that is a valid traceparent.
func TestUntrusted(t *testing.T) {
	tp, exp := newProvider(t)
	tr := Tracer(tp, "test")
	for name, tc := range map[string]struct {
		traceparent string
		links       int
	}{
		"valid":     {outside, 1},
		"none":      {"", 0},
		"malformed": {"00-zz-yy-01", 0},
		"all zero":  {"00-00000000000000000000000000000000-0000000000000000-01", 0},
	} {
		t.Run(name, func(t *testing.T) {
			exp.Reset()
			h := http.Header{}
			if tc.traceparent != "" {
				h.Set("Traceparent", tc.traceparent)
			}
			// Even a context that carries the caller's span as parent is
			// not continued.
			ctx := Continue(context.Background(), h)
			_, span := tr.Start(ctx, "server", Untrusted(h)...)
			span.End()
			got := exp.GetSpans()[0]
			if got.Parent.IsValid() {
				t.Errorf("the span has the caller's parent %v", got.Parent)
			}
			if got.SpanContext.TraceID().String() == "0af7651916cd43dd8448eb211c80319c" {
				t.Error("the span joined the caller's trace")
			}
			if len(got.Links) != tc.links {
				t.Fatalf("%d links, want %d", len(got.Links), tc.links)
			}
			if tc.links == 1 && got.Links[0].SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
				t.Errorf("link to %v", got.Links[0].SpanContext)
			}
		})
	}
}

// Inside the platform a trace goes on: Inject then Continue make the
// receiver's span the sender's child.
func TestInjectContinue(t *testing.T) {
	tp, exp := newProvider(t)
	tr := Tracer(tp, "test")
	ctx, parent := tr.Start(context.Background(), "client")
	h := http.Header{}
	Inject(ctx, h)
	if h.Get("Traceparent") == "" {
		t.Fatal("no traceparent injected")
	}
	_, child := tr.Start(Continue(context.Background(), h), "server")
	child.End()
	parent.End()
	got := exp.GetSpans()[0]
	if got.Parent.SpanID() != parent.SpanContext().SpanID() || got.SpanContext.TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("the server span's parent is %v, want %v", got.Parent, parent.SpanContext())
	}
	// No span, no header: nothing to continue.
	h = http.Header{}
	Inject(context.Background(), h)
	if len(h) != 0 {
		t.Errorf("headers without a span: %v", h)
	}
	Strip(http.Header{"Traceparent": {outside}, "Tracestate": {"a=b"}, "Baggage": {"k=v"}})
}

// A record's traceparent round-trips: the span continued from it is the
// writer's child, even after the writer's span ended; a malformed one
// continues nothing, and no tracestate rides along.
func TestTraceparent(t *testing.T) {
	tp, exp := newProvider(t)
	tr := Tracer(tp, "test")
	if got := Traceparent(context.Background()); got != "" {
		t.Errorf("Traceparent without a span = %q", got)
	}
	ts, err := trace.ParseTraceState("vendor=secret")
	if err != nil {
		t.Fatal(err)
	}
	ctx, writer := tr.Start(context.Background(), "writer")
	ctx = trace.ContextWithSpanContext(ctx, trace.SpanContextFromContext(ctx).WithTraceState(ts))
	tpv := Traceparent(ctx)
	writer.End()
	if len(tpv) != 55 {
		t.Fatalf("Traceparent = %q, want version 00's 55 bytes", tpv)
	}
	rc := trace.SpanContextFromContext(ContinueTraceparent(context.Background(), tpv))
	if !rc.IsRemote() || rc.SpanID() != writer.SpanContext().SpanID() || rc.TraceID() != writer.SpanContext().TraceID() || !rc.IsSampled() {
		t.Errorf("continued %v, want the writer's %v", rc, writer.SpanContext())
	}
	if rc.TraceState().Len() != 0 {
		t.Errorf("a tracestate came along: %v", rc.TraceState())
	}
	_, reader := tr.Start(ContinueTraceparent(context.Background(), tpv), "reader")
	reader.End()
	if got := exp.GetSpans()[1]; got.Parent.SpanID() != writer.SpanContext().SpanID() {
		t.Errorf("the reader's parent is %v", got.Parent)
	}
	for name, bad := range map[string]string{
		"malformed":  "00-zz-yy-01",
		"all zero":   "00-00000000000000000000000000000000-0000000000000000-01",
		"upper":      strings.ToUpper(outside),
		"trailing":   outside + "-00",
		"version ff": "ff" + outside[2:],
	} {
		if sc := trace.SpanContextFromContext(ContinueTraceparent(context.Background(), bad)); sc.IsValid() {
			t.Errorf("%s %q continued as %v", name, bad, sc)
		}
	}
}

// With tracing off, the calls on every hot path allocate nothing.
func TestOffAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	h := http.Header{"Content-Type": {"application/json"}}
	if n := testing.AllocsPerRun(100, func() {
		c, span := Start(ctx, Tracer(nil, "gateway"), "x")
		Inject(c, h)
		Strip(h)
		span.End()
		_ = FromContext(c, "tools")
		NewGenAIMetrics(nil).Record(c, ModelCall{})
		_ = Traceparent(c)
		_ = ContinueTraceparent(c, "")
	}); n != 0 {
		t.Errorf("%v allocations per call with tracing off", n)
	}
	if Tracer(nil, "x") != nil || FromContext(ctx, "x") != nil {
		t.Error("a tracer with tracing off")
	}
	if _, span := Start(ctx, nil, "x"); span.IsRecording() || trace.SpanFromContext(ctx).IsRecording() {
		t.Error("a recording span with tracing off")
	}
}

// A span's failure says what kind it was, never the error's text.
func TestEnd(t *testing.T) {
	tp, exp := newProvider(t)
	_, span := Tracer(tp, "test").Start(context.Background(), "x")
	End(span, errWithSecret{}, "model_error")
	got := exp.GetSpans()[0]
	if got.Status.Description != "model_error" {
		t.Errorf("status %q", got.Status.Description)
	}
	for _, kv := range got.Attributes {
		if kv.Value.Emit() == (errWithSecret{}).Error() {
			t.Errorf("the error's text is on the span")
		}
	}
}

type errWithSecret struct{}

func (errWithSecret) Error() string { return "sk-ant-secret in a message" }

// Whatever a report's traceparent holds, continuing it either changes
// nothing or yields a valid remote span that, for version 00, writes
// back as the same value.
func FuzzContinueTraceparent(f *testing.F) {
	for _, s := range []string{outside, "", "00-zz-yy-01", "01" + outside[2:] + "-extra", "ff" + outside[2:], outside[:54] + "4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tp string) {
		ctx := ContinueTraceparent(context.Background(), tp)
		sc := trace.SpanContextFromContext(ctx)
		if !sc.IsValid() {
			if ctx != context.Background() {
				t.Errorf("%q: a context changed without a span", tp)
			}
			return
		}
		if !sc.IsRemote() || sc.TraceState().Len() != 0 {
			t.Errorf("%q: continued as %v", tp, sc)
		}
		if strings.HasPrefix(tp, "00-") && Traceparent(ctx) != tp {
			t.Errorf("%q written back as %q", tp, Traceparent(ctx))
		}
	})
}
