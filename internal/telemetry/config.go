package telemetry

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/talkide/platform/internal/contract"
)

// Protocols of the OTLP exporters.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// Config says where spans and metrics go. The zero value exports nothing:
// telemetry is off unless an endpoint or a file is named.
type Config struct {
	// Disabled turns everything off whatever else is set
	// (OTEL_SDK_DISABLED=true).
	Disabled bool
	// TracesEndpoint and MetricsEndpoint are the OTLP endpoints' URLs;
	// empty: no OTLP export of that signal.
	TracesEndpoint, MetricsEndpoint string
	// Protocol is ProtocolHTTP (default) or ProtocolGRPC.
	Protocol string
	// Headers go with every export (OTEL_EXPORTER_OTLP_HEADERS): a
	// collector's credentials, never logged.
	Headers map[string]string
	// Sampler and SamplerArg are OTEL_TRACES_SAMPLER and its argument;
	// default parentbased_always_on.
	Sampler, SamplerArg string
	// ServiceName is the resource's service.name; empty: the role's.
	ServiceName string
	// ResourceAttributes are more resource attributes, as
	// OTEL_RESOURCE_ATTRIBUTES writes them (k=v,k2=v2, percent-encoded).
	ResourceAttributes string
	// File, when set, also writes every span as a JSON line to this file
	// (talkide dev --trace-file), for talkide admin trace.
	File string
}

// Enabled says whether the configuration exports anything.
func (c Config) Enabled() bool {
	return !c.Disabled && (c.TracesEndpoint != "" || c.MetricsEndpoint != "" || c.File != "")
}

// ConfigFromEnv reads the standard OTEL_* variables through getenv (the
// caller's, e.g. os.Getenv: this package reads no environment itself).
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := Config{
		Protocol:           strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL")),
		Sampler:            strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")),
		SamplerArg:         strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG")),
		ServiceName:        strings.TrimSpace(getenv("OTEL_SERVICE_NAME")),
		ResourceAttributes: getenv("OTEL_RESOURCE_ATTRIBUTES"),
	}
	if v := strings.TrimSpace(getenv("OTEL_SDK_DISABLED")); v != "" {
		d, err := strconv.ParseBool(v)
		if err != nil {
			return c, contract.Invalid(nil, "OTEL_SDK_DISABLED", "%q is not true or false", v)
		}
		c.Disabled = d
	}
	if p := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")); p != "" {
		c.Protocol = p
	}
	if c.Protocol == "" {
		c.Protocol = ProtocolHTTP
	}
	if c.Protocol != ProtocolHTTP && c.Protocol != ProtocolGRPC {
		return c, contract.Invalid(nil, "OTEL_EXPORTER_OTLP_PROTOCOL", "%q: want %s or %s", c.Protocol, ProtocolHTTP, ProtocolGRPC)
	}
	base := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	var err error
	if c.TracesEndpoint, err = endpoint(getenv, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", base, c.Protocol, "/v1/traces"); err != nil {
		return c, err
	}
	if c.MetricsEndpoint, err = endpoint(getenv, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", base, c.Protocol, "/v1/metrics"); err != nil {
		return c, err
	}
	if h := getenv("OTEL_EXPORTER_OTLP_HEADERS"); h != "" {
		if c.Headers, err = parsePairs(h); err != nil {
			// The value may hold a credential: it is not quoted.
			return c, contract.Invalid(nil, "OTEL_EXPORTER_OTLP_HEADERS", "not a list of key=value pairs")
		}
	}
	if _, err := parsePairs(c.ResourceAttributes); err != nil {
		return c, contract.Invalid(nil, "OTEL_RESOURCE_ATTRIBUTES", "%v", err)
	}
	if _, err := c.sampler(); err != nil {
		return c, err
	}
	return c, nil
}

// endpoint is the signal's own endpoint, used as it is, or the base
// endpoint with the signal's path (over HTTP; gRPC takes the base as it
// is).
func endpoint(getenv func(string) string, name, base, protocol, path string) (string, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" && base != "" {
		name, v = "OTEL_EXPORTER_OTLP_ENDPOINT", base
		if protocol == ProtocolHTTP {
			v = strings.TrimRight(base, "/") + path
		}
	}
	if v == "" {
		return "", nil
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", contract.Invalid(nil, name, "%q is not an http:// or https:// URL", v)
	}
	return v, nil
}

// parsePairs parses k=v,k2=v2 with percent-encoded values.
func parsePairs(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", k)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("the value of %q is not percent-encoded", k)
		}
		out[k] = dv
	}
	return out, nil
}
