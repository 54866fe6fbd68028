// Package telemetry sets up the OpenTelemetry SDK for a role: spans and
// GenAI metrics over OTLP (HTTP or gRPC) when an endpoint is configured,
// spans as JSON lines in a file for one machine (talkide dev
// --trace-file), and nothing at all otherwise. It also keeps log lines
// and spans together (LogHandler) and prints one turn's spans from the
// file (PrintTurn).
//
// The platform's packages never import it: they take a
// trace.TracerProvider or metric.MeterProvider in their options and use
// internal/observe's conventions.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/contract"
)

// Telemetry is a role's tracer and meter providers. A nil *Telemetry, or
// one made from a Config that exports nothing, hands out nil providers:
// tracing off.
type Telemetry struct {
	tp *sdktrace.TracerProvider // nil: off
	mp *sdkmetric.MeterProvider // nil: no metrics exported

	shutdown    sync.Once
	shutdownErr error // written once by shutdown
}

// New sets the SDK up for cfg. service names the role (service.name)
// unless cfg names one; attrs are more resource attributes (a worker's
// tenant and env). Shutdown flushes and ends it.
func New(ctx context.Context, cfg Config, service string, attrs ...attribute.KeyValue) (*Telemetry, error) {
	t := &Telemetry{}
	if !cfg.Enabled() {
		return t, nil
	}
	res, err := newResource(cfg, service, attrs)
	if err != nil {
		return nil, err
	}
	sampler, err := cfg.sampler()
	if err != nil {
		return nil, err
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSampler(sampler)}
	if cfg.TracesEndpoint != "" {
		exp, err := traceExporter(ctx, cfg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	if cfg.File != "" {
		exp, err := NewFileExporter(cfg.File)
		if err != nil {
			return nil, err
		}
		// Within a second in the file: a developer looks right after a
		// turn.
		opts = append(opts, sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)))
	}
	t.tp = sdktrace.NewTracerProvider(opts...)
	if cfg.MetricsEndpoint != "" {
		exp, err := metricExporter(ctx, cfg)
		if err != nil {
			_ = t.tp.Shutdown(ctx)
			return nil, err
		}
		t.mp = sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
	}
	return t, nil
}

// Enabled says whether spans are recorded.
func (t *Telemetry) Enabled() bool { return t != nil && t.tp != nil }

// TracerProvider is the provider of the role's spans; nil when tracing is
// off, as the parts' options take it.
func (t *Telemetry) TracerProvider() trace.TracerProvider {
	if t == nil || t.tp == nil {
		return nil
	}
	return t.tp
}

// MeterProvider is the provider of the role's OpenTelemetry metrics; nil
// when none are exported.
func (t *Telemetry) MeterProvider() metric.MeterProvider {
	if t == nil || t.mp == nil {
		return nil
	}
	return t.mp
}

// Flush exports what is pending now.
func (t *Telemetry) Flush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	var errs []error
	if t.tp != nil {
		errs = append(errs, t.tp.ForceFlush(ctx))
	}
	if t.mp != nil {
		errs = append(errs, t.mp.ForceFlush(ctx))
	}
	return errors.Join(errs...)
}

// Shutdown exports what is pending, within ctx, and stops the exporters.
// Only the first call does anything; the later ones return its error.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	t.shutdown.Do(func() {
		var errs []error
		if t.tp != nil {
			errs = append(errs, t.tp.Shutdown(ctx))
		}
		if t.mp != nil {
			errs = append(errs, t.mp.Shutdown(ctx))
		}
		t.shutdownErr = errors.Join(errs...)
	})
	return t.shutdownErr
}

func newResource(cfg Config, service string, attrs []attribute.KeyValue) (*resource.Resource, error) {
	pairs, err := parsePairs(cfg.ResourceAttributes)
	if err != nil {
		return nil, err
	}
	kvs := make([]attribute.KeyValue, 0, len(pairs)+len(attrs)+1)
	for k, v := range pairs {
		kvs = append(kvs, attribute.String(k, v))
	}
	kvs = append(kvs, attrs...)
	if cfg.ServiceName != "" {
		service = cfg.ServiceName
	}
	kvs = append(kvs, attribute.String("service.name", service))
	// Not resource.Default(): it reads the environment itself.
	return resource.NewSchemaless(kvs...), nil
}

func (c Config) sampler() (sdktrace.Sampler, error) {
	ratio := func() (float64, error) {
		if c.SamplerArg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(c.SamplerArg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, contract.Invalid(nil, "OTEL_TRACES_SAMPLER_ARG", "%q is not a ratio from 0 to 1", c.SamplerArg)
		}
		return r, nil
	}
	switch strings.ToLower(c.Sampler) {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio":
		r, err := ratio()
		return sdktrace.TraceIDRatioBased(r), err
	case "parentbased_traceidratio":
		r, err := ratio()
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), err
	}
	return nil, contract.Invalid(nil, "OTEL_TRACES_SAMPLER", "%q is not a sampler this platform knows (always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio)", c.Sampler)
}

func traceExporter(ctx context.Context, cfg Config) (sdktrace.SpanExporter, error) {
	if cfg.Protocol == ProtocolGRPC {
		return otlpExporter(ctx, "trace", cfg.TracesEndpoint, cfg.Headers, otlptracegrpc.WithEndpointURL, otlptracegrpc.WithHeaders, otlptracegrpc.New)
	}
	return otlpExporter(ctx, "trace", cfg.TracesEndpoint, cfg.Headers, otlptracehttp.WithEndpointURL, otlptracehttp.WithHeaders, otlptracehttp.New)
}

func metricExporter(ctx context.Context, cfg Config) (sdkmetric.Exporter, error) {
	if cfg.Protocol == ProtocolGRPC {
		return otlpExporter(ctx, "metric", cfg.MetricsEndpoint, cfg.Headers, otlpmetricgrpc.WithEndpointURL, otlpmetricgrpc.WithHeaders, otlpmetricgrpc.New)
	}
	return otlpExporter(ctx, "metric", cfg.MetricsEndpoint, cfg.Headers, otlpmetrichttp.WithEndpointURL, otlpmetrichttp.WithHeaders, otlpmetrichttp.New)
}

// otlpExporter makes the OTLP exporter of a signal with newExporter, which
// each signal and protocol has its own of, with its own option type O: to
// endpoint, and with headers when there are any.
func otlpExporter[O, E any](ctx context.Context, signal, endpoint string, headers map[string]string,
	withEndpoint func(string) O, withHeaders func(map[string]string) O,
	newExporter func(context.Context, ...O) (E, error)) (E, error) {
	opts := []O{withEndpoint(endpoint)}
	if len(headers) > 0 {
		opts = append(opts, withHeaders(headers))
	}
	exp, err := newExporter(ctx, opts...)
	if err != nil {
		var none E
		return none, fmt.Errorf("the OTLP %s exporter: %w", signal, err)
	}
	return exp, nil
}
