package build

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/talkide/platform/internal/kubetest"
)

// firstWrite closes its channel at the first write.
type firstWrite struct {
	once sync.Once
	c    chan struct{}
}

func (f *firstWrite) Write(p []byte) (int, error) {
	f.once.Do(func() { close(f.c) })
	return len(p), nil
}

// BenchmarkKubernetesDispatch measures, against the test API server, the
// time from Run (the tool call) to the Job existing, and from the build
// pod running to its first log line relayed to the tool's output (through
// the API server's pods/log from the stand-in kubelet). The test plays the
// Job controller in between, which a real cluster's timing replaces.
func BenchmarkKubernetesDispatch(b *testing.B) {
	f := newKubeFixtureTB(b, nil)
	ctx := context.Background()
	w, err := f.admin.BatchV1().Jobs(f.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var toJob, toLine time.Duration
	b.ResetTimer()
	for i := range b.N {
		call := fmt.Sprintf("toolu_bench%d", i)
		out := &firstWrite{c: make(chan struct{})}
		began := time.Now()
		done := f.start(ctx, f.request(call, out))
		var job *batchv1.Job
		for job == nil {
			ev := <-w.ResultChan()
			if j, ok := ev.Object.(*batchv1.Job); ok && ev.Type == watch.Added && j.Name == JobName("conv1", call) {
				job = j
			}
		}
		toJob += time.Since(began)
		pod := f.runPod(b, job)
		running := time.Now()
		f.kubelet.write(pod.Name, "first line")
		<-out.c
		toLine += time.Since(running)
		f.endPod(b, pod, 0, "Completed")
		kubetest.CompleteJob(b, f.admin, job)
		if r := <-done; r.err != nil || r.res.Status != Succeeded {
			b.Fatalf("build: %+v, %v", r.res, r.err)
		}
	}
	b.ReportMetric(float64(toJob.Microseconds())/float64(b.N)/1000, "ms-to-job")
	b.ReportMetric(float64(toLine.Microseconds())/float64(b.N)/1000, "ms-to-first-line")
}
