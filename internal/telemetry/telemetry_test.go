package telemetry

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/talkide/platform/internal/observe"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestConfigFromEnv(t *testing.T) {
	for name, tc := range map[string]struct {
		env     map[string]string
		want    Config
		enabled bool
		err     string
	}{
		"nothing": {env: nil, want: Config{Protocol: ProtocolHTTP}},
		"base endpoint over HTTP": {
			env:     map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"},
			want:    Config{Protocol: ProtocolHTTP, TracesEndpoint: "http://collector:4318/v1/traces", MetricsEndpoint: "http://collector:4318/v1/metrics"},
			enabled: true,
		},
		"base endpoint over gRPC": {
			env:     map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			want:    Config{Protocol: ProtocolGRPC, TracesEndpoint: "http://collector:4317", MetricsEndpoint: "http://collector:4317"},
			enabled: true,
		},
		"traces only": {
			env:     map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://c.example/otlp/traces", "OTEL_SERVICE_NAME": "cp-eu", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,team=a%20b"},
			want:    Config{Protocol: ProtocolHTTP, TracesEndpoint: "https://c.example/otlp/traces", ServiceName: "cp-eu", ResourceAttributes: "deployment.environment=prod,team=a%20b"},
			enabled: true,
		},
		"disabled": {
			env:  map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"},
			want: Config{Disabled: true, Protocol: ProtocolHTTP, TracesEndpoint: "http://c:4318/v1/traces", MetricsEndpoint: "http://c:4318/v1/metrics"},
		},
		"headers and sampler": {
			env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20x,tenant=t1",
				"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"},
			want: Config{Protocol: ProtocolHTTP, TracesEndpoint: "http://c:4318/v1/traces", MetricsEndpoint: "http://c:4318/v1/metrics",
				Headers: map[string]string{"authorization": "Bearer x", "tenant": "t1"}, Sampler: "parentbased_traceidratio", SamplerArg: "0.25"},
			enabled: true,
		},
		"bad protocol":        {env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, err: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		"bad endpoint":        {env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, err: "OTEL_EXPORTER_OTLP_ENDPOINT"},
		"bad traces endpoint": {env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://c"}, err: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		"bad disabled":        {env: map[string]string{"OTEL_SDK_DISABLED": "maybe"}, err: "OTEL_SDK_DISABLED"},
		"bad sampler":         {env: map[string]string{"OTEL_TRACES_SAMPLER": "jaeger_remote"}, err: "OTEL_TRACES_SAMPLER"},
		"bad ratio":           {env: map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, err: "OTEL_TRACES_SAMPLER_ARG"},
		"bad resource":        {env: map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "novalue"}, err: "OTEL_RESOURCE_ATTRIBUTES"},
		"bad headers":         {env: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "sk-ant-secret"}, err: "OTEL_EXPORTER_OTLP_HEADERS"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ConfigFromEnv(env(tc.env))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one naming %s", err, tc.err)
				}
				if strings.Contains(err.Error(), "sk-ant-secret") {
					t.Errorf("the error quotes the headers: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got)\n%s", d)
			}
			if got.Enabled() != tc.enabled {
				t.Errorf("Enabled = %v", got.Enabled())
			}
		})
	}
}

// Off, the role gets no provider at all: nothing to export, nothing
// allocated per span.
func TestOff(t *testing.T) {
	tel, err := New(context.Background(), Config{}, "x")
	if err != nil {
		t.Fatal(err)
	}
	if tel.Enabled() || tel.TracerProvider() != nil || tel.MeterProvider() != nil {
		t.Error("telemetry on without an endpoint")
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	var none *Telemetry
	if none.TracerProvider() != nil || none.Flush(context.Background()) != nil {
		t.Error("a nil Telemetry is not off")
	}
}

// The trace file, as talkide dev writes it, and talkide admin trace's
// tree of one turn's trace.
func TestTraceFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), TraceFileName)
	tel, err := New(context.Background(), Config{File: path, ServiceName: "talkide-test"}, "x")
	if err != nil {
		t.Fatal(err)
	}
	tr := observe.Tracer(tel.TracerProvider(), "test")
	turn := func(id string) {
		ctx, root := tr.Start(context.Background(), "POST /api/conversations/{id}/messages")
		tctx, ts := tr.Start(ctx, "turn", trace.WithAttributes(observe.Turn.String(id)))
		_, call := observe.StartModelCall(tctx, tr, "claude-sonnet-5-5")
		call.SetAttributes(observe.ModelCall{Input: 12, Output: 34, FinishReason: "end_turn"}.SpanAttributes()...)
		call.End()
		_, tool := tr.Start(tctx, "tool Bash", trace.WithAttributes(observe.Tool.String("Bash"), observe.ToolOutcome.String("error")))
		observe.End(tool, errors.New("exit 1"), "")
		ts.End()
		root.End()
	}
	turn("t_one")
	turn("t_two")
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A line cut short by a crash does not hide the rest.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"trace_id":"cut`)
	f.Close()

	var out bytes.Buffer
	if err := PrintTurn(&out, path, "t_one"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 6 || !strings.Contains(lines[0], "4 spans") {
		t.Fatalf("output:\n%s", out.String())
	}
	for i, want := range []string{
		"  POST /api/conversations/{id}/messages [talkide-test]",
		"    turn [talkide-test]",
		"      chat claude-sonnet-5-5 [talkide-test] usage.input_tokens=12 usage.output_tokens=34 usage.cache_read.input_tokens=0 usage.cache_creation.input_tokens=0 response.finish_reasons=[end_turn]",
		"      tool Bash [talkide-test] tool.name=Bash tool.outcome=error error.type=error ERROR",
	} {
		if !strings.HasSuffix(lines[2+i], want) {
			t.Errorf("line %d = %q, want it to end with %q", 2+i, lines[2+i], want)
		}
	}
	if err := PrintTurn(&out, path, "t_none"); !errors.Is(err, ErrNoTurn) {
		t.Errorf("a turn not in the file: %v", err)
	}
	if err := PrintTurn(&out, path, "../t_one"); err == nil {
		t.Error("a malformed turn id was accepted")
	}
	if err := PrintTurn(&out, filepath.Join(t.TempDir(), "missing"), "t_one"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("the trace file's mode is %v", st.Mode().Perm())
	}
}

// A line logged within a span names its trace and span; one logged
// outside names none.
func TestLogHandler(t *testing.T) {
	tel, err := New(context.Background(), Config{File: filepath.Join(t.TempDir(), "t.jsonl")}, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "test")
	ctx, span := observe.Tracer(tel.TracerProvider(), "test").Start(context.Background(), "x")
	log.InfoContext(ctx, "inside")
	span.End()
	log.Info("outside")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if !strings.Contains(lines[0], `"trace_id":"`+span.SpanContext().TraceID().String()+`"`) ||
		!strings.Contains(lines[0], `"span_id":"`+span.SpanContext().SpanID().String()+`"`) {
		t.Errorf("inside: %s", lines[0])
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Errorf("outside: %s", lines[1])
	}
}

// Sampling follows OTEL_TRACES_SAMPLER: always_off records nothing.
func TestSampler(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	tel, err := New(context.Background(), Config{File: path, Sampler: "always_off"}, "x")
	if err != nil {
		t.Fatal(err)
	}
	_, span := observe.Tracer(tel.TracerProvider(), "test").Start(context.Background(), "x", trace.WithAttributes(attribute.String("talkide.turn", "t_1")))
	span.End()
	tel.Shutdown(context.Background())
	if b, _ := os.ReadFile(path); len(b) != 0 {
		t.Errorf("spans recorded with always_off: %s", b)
	}
}

// Spans reach a collector over OTLP/gRPC too.
func TestExportGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recv := &grpcTraces{}
	srv := grpc.NewServer()
	colltrace.RegisterTraceServiceServer(srv, recv)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	defer func() { srv.Stop(); <-done }()
	tel, err := New(context.Background(), Config{Protocol: ProtocolGRPC, TracesEndpoint: "http://" + ln.Addr().String()}, "talkide-grpc")
	if err != nil {
		t.Fatal(err)
	}
	_, span := observe.Tracer(tel.TracerProvider(), "test").Start(context.Background(), "over grpc")
	span.End()
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Errorf("a second Shutdown: %v", err)
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if len(recv.names) != 1 || recv.names[0] != "over grpc" || recv.service != "talkide-grpc" {
		t.Errorf("received %v from %q", recv.names, recv.service)
	}
}

type grpcTraces struct {
	colltrace.UnimplementedTraceServiceServer
	mu      sync.Mutex
	names   []string // guarded by mu
	service string   // guarded by mu
}

func (g *grpcTraces) Export(_ context.Context, req *colltrace.ExportTraceServiceRequest) (*colltrace.ExportTraceServiceResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				g.service = kv.Value.GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				g.names = append(g.names, s.Name)
			}
		}
	}
	return &colltrace.ExportTraceServiceResponse{}, nil
}

func FuzzParsePairs(f *testing.F) {
	for _, s := range []string{"", "a=b", "a=b,c=d%20e", "=x", "a", "a=%zz", ",,a=b,,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parsePairs(s)
		if err != nil {
			return
		}
		for k := range m {
			if k == "" || strings.ContainsAny(k, ",=") {
				t.Errorf("parsePairs(%q) gave the key %q", s, k)
			}
		}
	})
}
