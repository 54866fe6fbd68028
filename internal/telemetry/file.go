package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// FileSpan is one line of a trace file: a span as JSON.
type FileSpan struct {
	TraceID    string         `json:"trace_id"`
	SpanID     string         `json:"span_id"`
	ParentID   string         `json:"parent_id,omitempty"`
	Name       string         `json:"name"`
	Kind       string         `json:"kind"`
	Service    string         `json:"service,omitempty"`
	Start      time.Time      `json:"start"`
	End        time.Time      `json:"end"`
	Error      string         `json:"error,omitempty"`
	Attributes map[string]any `json:"attributes,omitempty"`
	Links      []string       `json:"links,omitempty"` // trace_id/span_id of each link
}

// FileExporter writes spans as JSON lines, appending to one file. It is
// safe for concurrent use.
type FileExporter struct {
	mu sync.Mutex
	f  *os.File // guarded by mu; nil once shut down
}

// NewFileExporter opens (or creates, 0600) path for appending.
func NewFileExporter(path string) (*FileExporter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	return &FileExporter{f: f}, nil
}

// ExportSpans implements sdktrace.SpanExporter.
func (e *FileExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	var buf []byte
	for _, s := range spans {
		b, err := json.Marshal(fileSpan(s))
		if err != nil {
			return err
		}
		buf = append(append(buf, b...), '\n')
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f == nil {
		return errors.New("telemetry: the trace file is closed")
	}
	// One write per batch: lines of concurrent writers never interleave.
	_, err := e.f.Write(buf)
	return err
}

// Shutdown implements sdktrace.SpanExporter.
func (e *FileExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f == nil {
		return nil
	}
	err := e.f.Close()
	e.f = nil
	return err
}

func fileSpan(s sdktrace.ReadOnlySpan) FileSpan {
	fs := FileSpan{
		TraceID: s.SpanContext().TraceID().String(),
		SpanID:  s.SpanContext().SpanID().String(),
		Name:    s.Name(),
		Kind:    s.SpanKind().String(),
		Start:   s.StartTime().UTC(),
		End:     s.EndTime().UTC(),
	}
	if p := s.Parent(); p.IsValid() {
		fs.ParentID = p.SpanID().String()
	}
	if v, ok := s.Resource().Set().Value("service.name"); ok {
		fs.Service = v.AsString()
	}
	if st := s.Status(); st.Code == codes.Error {
		fs.Error = st.Description
		if fs.Error == "" {
			fs.Error = "error"
		}
	}
	if attrs := s.Attributes(); len(attrs) > 0 {
		fs.Attributes = make(map[string]any, len(attrs))
		for _, kv := range attrs {
			fs.Attributes[string(kv.Key)] = attrValue(kv.Value)
		}
	}
	for _, l := range s.Links() {
		fs.Links = append(fs.Links, l.SpanContext.TraceID().String()+"/"+l.SpanContext.SpanID().String())
	}
	return fs
}

func attrValue(v attribute.Value) any {
	switch v.Type() {
	case attribute.BOOL:
		return v.AsBool()
	case attribute.INT64:
		return v.AsInt64()
	case attribute.FLOAT64:
		return v.AsFloat64()
	case attribute.STRINGSLICE:
		return v.AsStringSlice()
	}
	return v.Emit()
}
