package observe

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ModelCall is what one model call measured: the GenAI span attributes
// and metrics are made from it.
type ModelCall struct {
	RequestModel, ResponseModel string
	ResponseID                  string
	FinishReason                string
	Input, Output               int64
	CacheRead, CacheCreation    int64
	Duration                    time.Duration
	// FirstToken is the time to the first streamed token; 0: none came.
	FirstToken time.Duration
	// ErrType is the failure's kind ("" when the call succeeded).
	ErrType string
}

// SpanAttributes are the call's GenAI attributes after it ended.
func (c ModelCall) SpanAttributes() []attribute.KeyValue {
	a := []attribute.KeyValue{
		GenAIInputTokens.Int64(c.Input), GenAIOutputTokens.Int64(c.Output),
		GenAICacheRead.Int64(c.CacheRead), GenAICacheCreation.Int64(c.CacheCreation),
	}
	if c.ResponseModel != "" {
		a = append(a, GenAIResponseModel.String(c.ResponseModel))
	}
	if c.ResponseID != "" {
		a = append(a, GenAIResponseID.String(c.ResponseID))
	}
	if c.FinishReason != "" {
		a = append(a, GenAIFinishReasons.StringSlice([]string{c.FinishReason}))
	}
	return a
}

// StartModelCall starts the client span of a chat call to model.
func StartModelCall(ctx context.Context, tr trace.Tracer, model string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if tr == nil {
		return ctx, noSpan
	}
	return tr.Start(ctx, "chat "+model, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(ChatOperation, Anthropic[0], Anthropic[1], GenAIRequestModel.String(model)),
		trace.WithAttributes(attrs...))
}

// GenAIMetrics are the GenAI client instruments of the OpenTelemetry
// semantic conventions. Their attributes are the operation, the provider,
// the models and the token type: no tenant, conversation or user (a
// worker's tenant and env are its resource's), so that their series stay
// as few as the models.
type GenAIMetrics struct {
	tokens     metric.Int64Histogram
	duration   metric.Float64Histogram
	firstToken metric.Float64Histogram
}

// NewGenAIMetrics makes the instruments from mp; nil mp: nil, whose
// Record does nothing.
func NewGenAIMetrics(mp metric.MeterProvider) *GenAIMetrics {
	if mp == nil {
		return nil
	}
	m := mp.Meter("github.com/talkide/platform/internal/observe")
	g := &GenAIMetrics{}
	// The instruments of a valid name and unit cannot fail to be made; an
	// error leaves a no-op instrument in place, which is what we want.
	g.tokens, _ = m.Int64Histogram("gen_ai.client.token.usage", metric.WithUnit("{token}"),
		metric.WithDescription("Number of input and output tokens used."),
		metric.WithExplicitBucketBoundaries(1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864))
	g.duration, _ = m.Float64Histogram("gen_ai.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("GenAI operation duration."),
		metric.WithExplicitBucketBoundaries(0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92))
	g.firstToken, _ = m.Float64Histogram("gen_ai.client.operation.time_to_first_chunk", metric.WithUnit("s"),
		metric.WithDescription("Time to receive the first chunk of a streamed response."),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0))
	return g
}

// Record records one call.
func (g *GenAIMetrics) Record(ctx context.Context, c ModelCall) {
	if g == nil {
		return
	}
	base := []attribute.KeyValue{ChatOperation, Anthropic[0], Anthropic[1], GenAIRequestModel.String(c.RequestModel)}
	if c.ResponseModel != "" {
		base = append(base, GenAIResponseModel.String(c.ResponseModel))
	}
	dur := base
	if c.ErrType != "" {
		dur = append(dur[:len(dur):len(dur)], ErrorType.String(c.ErrType))
	}
	g.duration.Record(ctx, c.Duration.Seconds(), metric.WithAttributes(dur...))
	if c.FirstToken > 0 {
		g.firstToken.Record(ctx, c.FirstToken.Seconds(), metric.WithAttributes(base...))
	}
	if c.ErrType != "" {
		return
	}
	// Input counts every prompt token, cached or not, as the conventions
	// define it.
	in := c.Input + c.CacheRead + c.CacheCreation
	g.tokens.Record(ctx, in, metric.WithAttributes(append(base[:len(base):len(base)], GenAITokenType.String("input"))...))
	g.tokens.Record(ctx, c.Output, metric.WithAttributes(append(base[:len(base):len(base)], GenAITokenType.String("output"))...))
}
