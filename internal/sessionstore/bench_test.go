package sessionstore

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
)

// BenchmarkAppendEvent measures appending one text.delta event, without
// and with a Sync after each (the worst case of group commit: nothing to
// share the fsync with).
func BenchmarkAppendEvent(b *testing.B) {
	for _, syncEach := range []bool{false, true} {
		b.Run(fmt.Sprintf("sync=%v", syncEach), func(b *testing.B) {
			sess := benchSession(b)
			b.ReportAllocs()
			for b.Loop() {
				ev := contract.Event{Kind: contract.KindTextDelta, TurnID: "t_0123456789", Text: "a few words of streamed model text"}
				if err := sess.AppendEvent(&ev); err != nil {
					b.Fatal(err)
				}
				if syncEach {
					if err := sess.Sync(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkGroupCommit measures 64 events appended and then made durable by
// one Sync, as a streaming turn does.
func BenchmarkGroupCommit(b *testing.B) {
	sess := benchSession(b)
	b.ReportAllocs()
	for b.Loop() {
		for i := 0; i < 64; i++ {
			if err := sess.AppendEvent(&contract.Event{Kind: contract.KindTextDelta, Text: "a few words of streamed model text"}); err != nil {
				b.Fatal(err)
			}
		}
		if err := sess.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/event")
}

// BenchmarkReplay measures replaying the last 100 events of a 10,000-event
// log: what a reconnecting client costs.
func BenchmarkReplay(b *testing.B) {
	sess := benchSession(b)
	appendN(b, sess, 10000, contract.KindTextDelta)
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		if err := sess.ReadEvents(9900, func(contract.Event) error { n++; return nil }); err != nil || n != 100 {
			b.Fatal(n, err)
		}
	}
}

// streamedSession creates session "bench" in a store on dir and appends n
// text deltas to it, as a long streamed turn does, with a Sync after every
// syncEvery of them.
func streamedSession(b *testing.B, dir string, n, syncEvery int) (*Store, *Session) {
	b.Helper()
	st := newStoreAt(b, dir, "w", nil)
	sess := mustCreate(b, st, "bench", Meta{Harness: "native"})
	for i := 0; i < n; i++ {
		if err := sess.AppendEvent(&contract.Event{Kind: contract.KindTextDelta, TurnID: "t_0123456789", Text: "a few words of streamed model text"}); err != nil {
			b.Fatal(err)
		}
		if i%syncEvery == syncEvery-1 {
			sess.Sync()
		}
	}
	return st, sess
}

// resume is what a worker that takes session "bench" over does first: it
// loads it and makes a session.resumed event durable.
func resume(b *testing.B, st *Store) *Session {
	s, err := st.Load("bench")
	if err != nil {
		b.Fatal(err)
	}
	if err := s.AppendEvent(&contract.Event{Kind: contract.KindSessionResumed}); err != nil {
		b.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkResume measures opening a session of n events (lease, checkpoint,
// tail scan, owner marker) and appending the first new event: the time
// from a worker restart to the first new event.
func BenchmarkResume(b *testing.B) {
	for _, n := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "projects")
			st, sess := streamedSession(b, dir, n, 1000)
			sess.Close()
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				s := resume(b, st)
				b.ReportMetric(float64(time.Since(start).Microseconds()), "µs/resume")
				b.StopTimer()
				s.Close()
				b.StartTimer()
			}
		})
	}
}

// benchSession is a new session of a new store, closed when b ends.
func benchSession(b *testing.B) *Session {
	b.Helper()
	sess, _, err := newStore(b).Create("bench", Meta{Harness: "native"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sess.Close() })
	return sess
}
