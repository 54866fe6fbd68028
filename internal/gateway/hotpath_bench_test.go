package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/gateway"
	"github.com/talkide/platform/internal/metrics"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/sqlite"
	"github.com/talkide/platform/internal/trust"
)

// BenchmarkServe measures the gateway's own work per call and per streamed
// event, without the network: the handler is called directly and the
// upstream is an in-memory RoundTripper that returns one event per Read (a
// stream at a model's pace, where no two events share a read). Wired as
// cmd/talkide wires it: a SQLite store, the budget service (a user with a
// daily limit), Prometheus metrics, the JSON log line (to io.Discard).
//
// The per-event cost is the difference of the two sizes divided by the
// difference of their events (docs/benchmarks.md).
func BenchmarkServe(b *testing.B) {
	for _, deltas := range []int{1, 81} {
		b.Run(fmt.Sprintf("deltas=%d", deltas), func(b *testing.B) {
			benchServe(b, deltas, nil)
		})
	}
}

// BenchmarkServeTracing is BenchmarkServe's one-delta call with tracing
// off (no provider: what runs unless an OTLP endpoint is configured) and
// on (the SDK, every call sampled, its spans batched to an exporter that
// drops them): what a span of each call and of its budget admission costs
// (docs/observability.md).
func BenchmarkServeTracing(b *testing.B) {
	b.Run("tracing=off", func(b *testing.B) { benchServe(b, 1, nil) })
	b.Run("tracing=on", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardSpans{}))
		b.Cleanup(func() { tp.Shutdown(context.Background()) })
		benchServe(b, 1, tp)
	})
}

// discardSpans is a span exporter that drops what it is given.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

const benchKey = "sk-ant-bench-hotpath"

// eventsOf returns a stream of the shape bench/gateway's simulator sends:
// message_start, a text block of deltas, message_delta, message_stop.
func eventsOf(deltas int) [][]byte {
	evs := [][]byte{
		[]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-6\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":4000,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":1}}}\n\n"),
		[]byte("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"),
	}
	for range deltas {
		evs = append(evs, []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" the gateway checks\"}}\n\n"))
	}
	return append(evs,
		[]byte("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"),
		[]byte("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":250}}\n\n"),
		[]byte("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
	)
}

// eventReader returns one event per Read.
type eventReader struct {
	evs [][]byte
	i   int
}

func (r *eventReader) Read(p []byte) (int, error) {
	if r.i >= len(r.evs) {
		return 0, io.EOF
	}
	n := copy(p, r.evs[r.i])
	r.i++
	return n, nil
}

func (r *eventReader) Close() error { return nil }

// memUpstream answers every request with the stream, reading the request
// body first as the API does.
type memUpstream struct{ evs [][]byte }

func (u memUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{
		StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}, "Request-Id": {"req_1"}},
		Body:          &eventReader{evs: u.evs},
		ContentLength: -1,
		Request:       r,
	}, nil
}

// sinkWriter is a ResponseWriter that discards what it is sent, with Flush.
type sinkWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *sinkWriter) Header() http.Header         { return w.h }
func (w *sinkWriter) WriteHeader(s int)           { w.status = s }
func (w *sinkWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }
func (w *sinkWriter) Flush()                      {}

func benchServe(b *testing.B, deltas int, tp trace.TracerProvider) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, ":memory:", nil)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	conv := store.Conversation{ID: "conv-bench", Tenant: "bench", Env: "prod", UserID: "alice", Title: "bench", CreatedAt: now}
	if err := st.PutEnv(ctx, store.Env{Tenant: "bench", Name: "prod", WorkerURL: "http://127.0.0.1:1", CreatedAt: now}); err != nil {
		b.Fatal(err)
	}
	if err := st.PutUser(ctx, store.User{ID: "alice", Name: "alice", CreatedAt: now}); err != nil {
		b.Fatal(err)
	}
	if _, _, err := st.CreateConversation(ctx, conv); err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, &metrics.Options{Prices: budget.DefaultPrices()})
	svc := budget.New(st, budget.DefaultPrices(), &budget.Options{Settled: m.Settled})
	if err := svc.SetLimit(ctx, budget.Limit{Subject: budget.User("alice"), Kind: budget.SpendPerDay, Max: int64(1_000_000 * budget.Dollar)}); err != nil {
		b.Fatal(err)
	}
	keys, err := trust.NewKeyring("k1", map[string][]byte{"k1": bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		b.Fatal(err)
	}
	up, _ := url.Parse("https://api.anthropic.example")
	gw := gateway.New(up, benchKey, keys, st, &gateway.Options{
		Logger:    slog.New(slog.NewJSONHandler(io.Discard, nil)).With("component", "gateway"),
		Budget:    svc,
		Metrics:   m,
		Transport: memUpstream{evs: eventsOf(deltas)},
		// A nil interface, not a nil *TracerProvider, when off.
		TracerProvider: tp,
	})
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		gw.Close(ctx)
		svc.Close(ctx)
		st.Close()
	})
	tok, _ := keys.MintWorkerToken(conv.Tenant, conv.Env, conv.ID, now)
	body := []byte(`{"model":"claude-sonnet-4-6","max_tokens":8192,"stream":true,"system":"` +
		strings.Repeat("You are Mara, a coding agent. ", 500) + `","messages":[{"role":"user","content":"hello"}]}`)
	hdr := http.Header{
		"X-Worker-Token":    {tok},
		"Anthropic-Version": {"2023-06-01"},
		"Content-Type":      {"application/json"},
		"User-Agent":        {"Anthropic/Go 1.0"},
	}
	target := gateway.Prefix + "/v1/messages"
	serve := func() *sinkWriter {
		r, _ := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
		r.Header = hdr.Clone()
		r.RemoteAddr = "127.0.0.1:40000"
		w := &sinkWriter{h: http.Header{}}
		gw.ServeHTTP(w, r)
		return w
	}
	if w := serve(); w.status != 200 {
		b.Fatalf("status %d", w.status)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		serve()
	}
	b.StopTimer()
	// The background writes of the calls are part of their cost.
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	gw.Flush(fctx)
	svc.Flush(fctx)
}
