package gateway

import (
	"net/http"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/talkide/platform/internal/budget"
)

const workerSpan = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func tracedHarness(t *testing.T, upstream http.Handler, o *Options) (*harness, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(t.Context()) })
	o.TracerProvider = tp
	return newHarness(t, upstream, o), exp
}

func spanNamed(spans tracetest.SpanStubs, name string) *tracetest.SpanStub {
	for i := range spans {
		if spans[i].Name == name {
			return &spans[i]
		}
	}
	return nil
}

func attrOf(s *tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// A call whose WorkerToken verified continues the worker's trace, with the
// usage on its span; the trace headers stop at the gateway. A call whose
// token did not verify makes no span, whatever traceparent it sent.
func TestTraceContinuesVerifiedCalls(t *testing.T) {
	var mu sync.Mutex
	var upstreamHeaders http.Header // guarded by mu
	up := fakeAnthropic()
	h, exp := tracedHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		upstreamHeaders = r.Header.Clone()
		mu.Unlock()
		up.ServeHTTP(w, r)
	}), &Options{})
	hdr := tokenHeader(h.mint(convA))
	hdr.Set("Traceparent", workerSpan)
	hdr.Set("Tracestate", "vendor=1")
	hdr.Set("Baggage", "user=someone")
	resp := h.post(t, "/v1/messages", hdr, `{"model":"`+testModel+`","max_tokens":10,"messages":[]}`)
	readAll(t, resp.Body)
	h.waitServed(t)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	s := spanNamed(exp.GetSpans(), "gateway POST /v1/messages")
	if s == nil {
		t.Fatalf("no gateway span: %v", exp.GetSpans())
	}
	if s.Parent.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("the span's parent is %v, want the worker's span", s.Parent)
	}
	for k, want := range map[string]string{
		"talkide.tenant": convA.Tenant, "talkide.env": convA.Env, "talkide.conversation": convA.ID,
		"gen_ai.response.model": testModel, "gen_ai.usage.input_tokens": "12", "gen_ai.usage.output_tokens": "6",
		"gen_ai.usage.cache_read.input_tokens": "4", "gen_ai.usage.cache_creation.input_tokens": "3",
		"http.response.status_code": "200", "gen_ai.provider.name": "anthropic",
	} {
		if got := attrOf(s, k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	mu.Lock()
	for _, k := range []string{"Traceparent", "Tracestate", "Baggage"} {
		if v := upstreamHeaders.Get(k); v != "" {
			t.Errorf("%s reached the upstream: %q", k, v)
		}
	}
	mu.Unlock()

	exp.Reset()
	bad := tokenHeader(flip(h.mint(convA), 10))
	bad.Set("Traceparent", workerSpan)
	resp = h.post(t, "/v1/messages", bad, `{"model":"`+testModel+`","max_tokens":10,"messages":[]}`)
	readAll(t, resp.Body)
	h.waitServed(t)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a bad token: status %d", resp.StatusCode)
	}
	if spans := exp.GetSpans(); len(spans) != 0 {
		t.Errorf("a call whose token did not verify made spans: %v", spans)
	}
}

// The budget's decision is on the trace: admitted, or which kind of limit
// of which scope refused the call — never whose limit.
func TestTraceBudgetDecision(t *testing.T) {
	svc := newBudget(t, nil)
	if err := svc.SetLimit(t.Context(), budget.Limit{Subject: budget.User(convB.UserID), Kind: budget.RequestsPerMinute, Max: 0}); err != nil {
		t.Fatal(err)
	}
	h, exp := tracedHarness(t, fakeAnthropic(), &Options{Budget: svc})
	for conv, want := range map[string]string{convA.ID: "admitted", convB.ID: "denied"} {
		exp.Reset()
		c := convA
		if conv == convB.ID {
			c = convB
		}
		resp := h.post(t, "/v1/messages", tokenHeader(h.mint(c)), `{"model":"`+testModel+`","max_tokens":10,"messages":[]}`)
		readAll(t, resp.Body)
		h.waitServed(t)
		spans := exp.GetSpans()
		decision, kind := "", ""
		for i := range spans {
			if d := attrOf(&spans[i], "talkide.budget.decision"); d != "" {
				decision, kind = d, attrOf(&spans[i], "talkide.budget.kind")
			}
			for _, kv := range spans[i].Attributes {
				if kv.Value.Emit() == c.UserID {
					t.Errorf("a span names the user: %s", kv.Key)
				}
			}
		}
		if want == "denied" && (decision != "denied" && decision != "refused" || kind != string(budget.RequestsPerMinute)) {
			t.Errorf("%s: decision %q kind %q, want a refusal by %s", conv, decision, kind, budget.RequestsPerMinute)
		}
		if want == "admitted" && decision != "admitted" {
			t.Errorf("%s: decision %q", conv, decision)
		}
	}
}
