package roles

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"

	"github.com/talkide/platform/internal/lifecycle"
	"github.com/talkide/platform/internal/observe"
	"github.com/talkide/platform/internal/telemetry"
)

// startTelemetry returns a role's telemetry: shared, when talkide dev
// hands its own down, or the role's own, made from cfg, whose Shutdown
// (the last spans and metrics exported) is the group's last stop step,
// since it must be the group's first part. log gains the trace ids of the
// lines logged within a span.
func startTelemetry(ctx context.Context, g *lifecycle.Group, shared *telemetry.Telemetry, cfg telemetry.Config, log **slog.Logger, service string, attrs ...attribute.KeyValue) (*telemetry.Telemetry, error) {
	if shared != nil {
		return shared, nil
	}
	t, err := telemetry.New(ctx, cfg, service, attrs...)
	if err != nil {
		return nil, err
	}
	if t.Enabled() {
		*log = slog.New(telemetry.LogHandler((*log).Handler()))
		g.Defer("telemetry", func(ctx context.Context) error {
			tctx, cancel := afterGrace(ctx)
			defer cancel()
			return t.Shutdown(tctx)
		})
	}
	return t, nil
}

// envResource names a worker's tenant-env on everything it exports: one
// worker serves one, so its metrics need no label of their own for it.
func envResource(tenant, env string) []attribute.KeyValue {
	return []attribute.KeyValue{observe.Tenant.String(tenant), observe.Env.String(env)}
}
