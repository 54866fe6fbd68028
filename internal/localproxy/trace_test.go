package localproxy

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/roundtrip"
)

// A model call through the proxy joins the trace of its conversation's
// running turn, and its traceparent to the gateway names the proxy's
// span; what the agent's process sent as traceparent is only a link.
// Without a running turn the call is a root of its own.
func TestTraceJoinsTheTurn(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	// The proxy's span ends after the response has reached the client:
	// the test waits for it.
	ended := endedSpans(make(chan string, 16))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSpanProcessor(ended))
	defer tp.Shutdown(context.Background())
	_, turn := tp.Tracer("test").Start(context.Background(), "turn")
	defer turn.End()
	ms := newMintServer(t)
	gw := newGateway(t, nil)
	s := startProxyWith(t, gw.srv.URL, ms, &Options{TracerProvider: tp, Turn: func(id string) trace.SpanContext {
		if id == "conv-a" {
			return turn.SpanContext()
		}
		return trace.SpanContext{}
	}})
	const forged = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, conv := range []string{"conv-a", "conv-b"} {
		exp.Reset()
		req, _ := http.NewRequest(http.MethodPost, s.BaseURLFor(conv)+"/v1/messages", strings.NewReader(`{"model":"m"}`))
		req.Header.Set("Authorization", "Bearer "+s.Capability(conv))
		req.Header.Set("Traceparent", forged)
		req.Header.Set("Tracestate", "evil=1")
		req.Header.Set("Baggage", "user=someone")
		if resp, body := roundtrip.Do(t, req); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", conv, resp.StatusCode, body)
		}
		ended.wait(t, "localproxy POST /v1/messages")
		var span, mint tracetest.SpanStub
		for _, sp := range exp.GetSpans() {
			switch sp.Name {
			case "localproxy POST /v1/messages":
				span = sp
			case "worker token mint":
				mint = sp
			default:
				t.Errorf("%s: span %q", conv, sp.Name)
			}
		}
		if mint.Parent.SpanID() != span.SpanContext.SpanID() {
			t.Errorf("%s: the mint's span is not the call's child", conv)
		}
		all := gw.received()
		got := all[len(all)-1].Header
		if want := "00-" + span.SpanContext.TraceID().String() + "-" + span.SpanContext.SpanID().String() + "-01"; got.Get("Traceparent") != want {
			t.Errorf("%s: the gateway got traceparent %q, want the proxy span's %q", conv, got.Get("Traceparent"), want)
		}
		if got.Get("Tracestate") != "" || got.Get("Baggage") != "" {
			t.Errorf("%s: the caller's tracestate or baggage reached the gateway: %v", conv, got)
		}
		if len(span.Links) != 0 && conv == "conv-a" {
			t.Errorf("%s: a span under the turn links the caller's", conv)
		}
		switch conv {
		case "conv-a":
			if span.Parent.SpanID() != turn.SpanContext().SpanID() || span.SpanContext.TraceID() != turn.SpanContext().TraceID() {
				t.Errorf("the call's parent is %v, want the turn %v", span.Parent, turn.SpanContext())
			}
		case "conv-b":
			if span.Parent.IsValid() || span.SpanContext.TraceID().String() == "0af7651916cd43dd8448eb211c80319c" {
				t.Errorf("without a turn the call joined the caller's trace: %v", span.Parent)
			}
			if len(span.Links) != 1 || span.Links[0].SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
				t.Errorf("the caller's span is not linked: %v", span.Links)
			}
		}
	}
}

// Tracing off, the caller's trace headers are still not passed on.
func TestTraceHeadersStrippedWhenOff(t *testing.T) {
	ms := newMintServer(t)
	gw := newGateway(t, nil)
	s := startProxy(t, gw.srv.URL, ms)
	req, _ := http.NewRequest(http.MethodPost, s.BaseURLFor("conv-a")+"/v1/messages", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+s.Capability("conv-a"))
	req.Header.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	roundtrip.Do(t, req)
	all := gw.received()
	if h := all[len(all)-1].Header; h.Get("Traceparent") != "" {
		t.Errorf("the caller's traceparent reached the gateway: %v", h)
	}
}

// endedSpans tells the names of the spans that end.
type endedSpans chan string

func (e endedSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (e endedSpans) OnEnd(s sdktrace.ReadOnlySpan)                   { e <- s.Name() }
func (e endedSpans) Shutdown(context.Context) error                  { return nil }
func (e endedSpans) ForceFlush(context.Context) error                { return nil }

func (e endedSpans) wait(t *testing.T, name string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case n := <-e:
			if n == name {
				return
			}
		case <-timeout:
			t.Fatalf("span %q never ended", name)
		}
	}
}
