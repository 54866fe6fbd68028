package telemetry

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// LogHandler wraps h so that a record logged with a context holding a
// recording span (slog's …Context methods) carries trace_id and span_id:
// a log line leads to its trace, and the trace back to its lines.
func LogHandler(h slog.Handler) slog.Handler { return &logHandler{h} }

type logHandler struct{ slog.Handler }

func (l *logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return l.Handler.Handle(ctx, r)
}

func (l *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &logHandler{l.Handler.WithAttrs(as)}
}

func (l *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{l.Handler.WithGroup(name)}
}
