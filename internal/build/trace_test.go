package build

import (
	"context"
	"slices"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/talkide/platform/internal/kubetest"
	"github.com/talkide/platform/internal/syncbuf"
)

// A Kubernetes build marks its steps on the build's span (Job created, pod
// running, Job finished) and its wait for a slot as a span of its own.
func TestKubernetesBuildTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("test").Start(context.Background(), "build")

	f := newKubeFixture(t, nil)
	var out syncbuf.Buffer
	done, job, pod := f.startRunning(t, ctx, "toolu_traced", &out)
	f.kubelet.write(pod.Name, "BUILD SUCCESSFUL in 1s")
	// Followed, so seen running, before it ends.
	waitOutput(t, &out, "BUILD SUCCESSFUL", done)
	f.endPod(t, pod, 0, "Completed")
	kubetest.CompleteJob(t, f.admin, job)
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
	span.End()

	var events []string
	var queue *tracetest.SpanStub
	spans := exp.GetSpans()
	for i, s := range spans {
		switch s.Name {
		case "build":
			for _, e := range s.Events {
				events = append(events, e.Name)
			}
		case "build queue":
			queue = &spans[i]
		}
	}
	if want := []string{"job created", "pod running", "job finished"}; !slices.Equal(events, want) {
		t.Errorf("the build span's events are %q, want %q", events, want)
	}
	if queue == nil || queue.Parent.SpanID() != span.SpanContext().SpanID() {
		t.Errorf("no build queue span under the build's: %+v", queue)
	}
}
