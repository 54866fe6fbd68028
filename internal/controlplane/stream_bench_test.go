package controlplane_test

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/talkide/platform/internal/controlplane"
)

// BenchmarkStreamFanOut follows one conversation from N browsers over
// loopback: one op is one event delivered to all of them. It reports the
// worker streams the control-plane opened (the hub's point: 1, where the
// relay without a hub opened N), and what each stream costs: goroutines
// and heap, of both ends together, since the browsers run in this process
// too.
func BenchmarkStreamFanOut(b *testing.B) {
	for _, n := range []int{1, 16, 256, 1024} {
		b.Run(fmt.Sprintf("browsers=%d", n), func(b *testing.B) {
			l := newEventLog(200)
			h := newHarness(b, harnessOptions{worker: fakeOptions{stream: l.serve},
				streams: controlplane.Options{MaxStreamsPerUser: n, MaxStreamsPerConversation: n, MaxStreams: n}})
			h.insertConversation("demo", user, env)

			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			g0 := runtime.NumGoroutine()
			var (
				batchEnd atomic.Int64
				batch    atomic.Pointer[sync.WaitGroup]
			)
			for range n {
				br := h.browser("/api/conversations/demo/stream", "")
				go func() {
					for {
						ev, err := br.rd.Next()
						if err != nil {
							return
						}
						if seq, _ := strconv.ParseInt(ev.ID, 10, 64); seq == batchEnd.Load() {
							batch.Load().Done()
						}
					}
				}()
			}
			// Every stream is open and following the hub once the first
			// event reached all of them.
			deliver := func(k int64, end int64) {
				var wg sync.WaitGroup
				wg.Add(n)
				batch.Store(&wg)
				batchEnd.Store(end)
				l.append(int(k))
				wg.Wait()
			}
			deliver(1, 1)
			runtime.GC()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			perStream := float64(int64(after.HeapInuse+after.StackInuse)-int64(before.HeapInuse+before.StackInuse)) / float64(n)
			goroutines := float64(runtime.NumGoroutine()-g0) / float64(n)

			b.ResetTimer()
			const per = 16 // events per batch, within the browsers' queues
			for seq := int64(1); seq < int64(b.N)+1; {
				k := min(per, int64(b.N)+1-seq)
				deliver(k, seq+k)
				seq += k
			}
			b.StopTimer()
			b.ReportMetric(float64(len(h.worker.Afters())), "worker-streams")
			b.ReportMetric(perStream, "heap+stack-B/stream")
			b.ReportMetric(goroutines, "goroutines/stream")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/delivery")
		})
	}
}
