// Package observe holds the platform's tracing and GenAI metric
// conventions, shared by both sides of the seam: the attribute keys, a
// package's tracer from an optional provider, and traceparent across the
// seams where a trace may (or may not) be continued.
//
// It depends on the OpenTelemetry API only; internal/telemetry sets the SDK
// up. A nil provider anywhere means tracing is off: nothing is recorded
// and nothing allocated per span.
package observe

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys of the platform's own ids. They name tenants, envs,
// conversations and turns, never a user's words, a tool's input or output,
// a token or a key.
const (
	Tenant       = attribute.Key("talkide.tenant")
	Env          = attribute.Key("talkide.env")
	Conversation = attribute.Key("talkide.conversation")
	Turn         = attribute.Key("talkide.turn")
	Tool         = attribute.Key("talkide.tool.name")
	ToolCallID   = attribute.Key("talkide.tool.call_id")
	ToolOutcome  = attribute.Key("talkide.tool.outcome")
	Build        = attribute.Key("talkide.build")
	ReportKind   = attribute.Key("talkide.report.kind")
)

// GenAI semantic convention keys.
const (
	GenAIOperation      = attribute.Key("gen_ai.operation.name")
	GenAISystem         = attribute.Key("gen_ai.system")
	GenAIProvider       = attribute.Key("gen_ai.provider.name")
	GenAIRequestModel   = attribute.Key("gen_ai.request.model")
	GenAIResponseModel  = attribute.Key("gen_ai.response.model")
	GenAIResponseID     = attribute.Key("gen_ai.response.id")
	GenAIFinishReasons  = attribute.Key("gen_ai.response.finish_reasons")
	GenAIInputTokens    = attribute.Key("gen_ai.usage.input_tokens")
	GenAIOutputTokens   = attribute.Key("gen_ai.usage.output_tokens")
	GenAICacheRead      = attribute.Key("gen_ai.usage.cache_read.input_tokens")
	GenAICacheCreation  = attribute.Key("gen_ai.usage.cache_creation.input_tokens")
	GenAITokenType      = attribute.Key("gen_ai.token.type")
	GenAIConversationID = attribute.Key("gen_ai.conversation.id")
	ErrorType           = attribute.Key("error.type")
)

// Anthropic is the provider every model call of the platform goes to.
var (
	ChatOperation = GenAIOperation.String("chat")
	Anthropic     = []attribute.KeyValue{GenAISystem.String("anthropic"), GenAIProvider.String("anthropic")}
)

// Tracer is the tracer of the package named pkg from tp; nil when tp is
// nil, which is how a part is told that tracing is off.
func Tracer(tp trace.TracerProvider, pkg string) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(scope + pkg)
}

const scope = "github.com/talkide/platform/internal/"

// FromContext is the tracer of the package named pkg for a span under
// ctx's: that span's provider's, or nil when ctx holds no recording span
// (tracing off, or the trace not sampled). Parts deep in a turn (tools,
// the sandbox, builds) take their tracer this way rather than in their
// options.
func FromContext(ctx context.Context, pkg string) trace.Tracer {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return nil
	}
	return span.TracerProvider().Tracer(scope + pkg)
}

// Start starts a span with tr; with a nil tr it returns ctx as it is and
// a span that records nothing, without allocating.
func Start(ctx context.Context, tr trace.Tracer, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if tr == nil {
		return ctx, noSpan
	}
	return tr.Start(ctx, name, opts...)
}

// noSpan records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// traceContext is W3C Trace Context (traceparent, tracestate), and only
// that: no baggage crosses a seam, so nothing a caller puts there reaches
// another process.
var traceContext = propagation.TraceContext{}

// Inject writes ctx's span into h as traceparent (and tracestate); with
// no span it writes nothing.
func Inject(ctx context.Context, h http.Header) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	traceContext.Inject(ctx, propagation.HeaderCarrier(h))
}

// Continue returns ctx with the remote span of h's traceparent as the
// parent of the spans started from it. Call it only for a request whose
// sender is authenticated as a part of the platform (a verified command
// signature, a verified WorkerToken): a trace is continued only from
// inside.
func Continue(ctx context.Context, h http.Header) context.Context {
	if h.Get("Traceparent") == "" {
		return ctx
	}
	return traceContext.Extract(ctx, propagation.HeaderCarrier(h))
}

// Traceparent is ctx's span context as a W3C traceparent, for a record
// that carries its trace in its own body rather than in a header (a
// report, which may be sent long after its span ended); "" when ctx holds
// no span, without allocating.
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	var c traceparentCarrier
	traceContext.Inject(ctx, &c)
	return c.v
}

// ContinueTraceparent is Continue for a traceparent that Traceparent
// wrote: ctx with its span as the remote parent, or ctx as it is when tp
// is empty or malformed. Only for a value inside a body whose sender is
// authenticated as a part of the platform.
func ContinueTraceparent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return traceContext.Extract(ctx, &traceparentCarrier{v: tp})
}

// traceparentCarrier carries traceparent alone: a record's trace never
// brings a tracestate along.
type traceparentCarrier struct{ v string }

func (c *traceparentCarrier) Get(key string) string {
	if key == "traceparent" {
		return c.v
	}
	return ""
}

func (c *traceparentCarrier) Set(key, v string) {
	if key == "traceparent" {
		c.v = v
	}
}

func (c *traceparentCarrier) Keys() []string { return []string{"traceparent"} }

// Untrusted is the start option for a span serving a request from outside
// the platform (a browser, the agent's own processes): a new root, never
// a child of what the caller claims, with a link to the caller's span
// when it sent a valid traceparent, so that a trace of its own can still
// be found from ours.
func Untrusted(h http.Header) []trace.SpanStartOption {
	opts := []trace.SpanStartOption{trace.WithNewRoot()}
	if h.Get("Traceparent") == "" {
		return opts
	}
	remote := trace.SpanContextFromContext(traceContext.Extract(context.Background(), propagation.HeaderCarrier(h)))
	if remote.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: remote, Attributes: []attribute.KeyValue{
			attribute.String("talkide.link", "caller"),
		}}))
	}
	return opts
}

// Strip removes the trace headers from h: what a caller outside the
// platform sent is not passed on as ours.
func Strip(h http.Header) {
	h.Del("Traceparent")
	h.Del("Tracestate")
	h.Del("Baggage")
}

// End ends span with err's status: only its kind of failure is recorded,
// as error.type, never err's text, which may quote a tool's output or a
// path.
func End(span trace.Span, err error, errType string) {
	if err != nil {
		if errType == "" {
			errType = "error"
		}
		span.SetAttributes(ErrorType.String(errType))
		span.SetStatus(codes.Error, errType)
	}
	span.End()
}
