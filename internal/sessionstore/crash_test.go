package sessionstore

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/talkide/platform/internal/contract"
)

// A worker that crashes before every 512th event still gets checkpoints:
// the events a reopen scans after the checkpoint count towards the next
// one, so what a reopen scans stays bounded however often it crashes.
func TestCheckpointsAcrossCrashes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "projects")
	st := newStoreAt(t, dir, "w", nil)
	s := mustCreate(t, st, "c1", Meta{})
	const perRun, runs = 300, 10
	for run := 0; run < runs; run++ {
		if run > 0 {
			// The previous process died without Close; its successor
			// (same holder name) reopens at once.
			var err error
			if s, err = st.Load("c1"); err != nil {
				t.Fatal(err)
			}
		}
		appendN(t, s, perRun, contract.KindTextDelta)
		s.closeFiles() // a crash: no Sync beyond appendN's, no checkpoint, no release
	}
	ck, ok := readCheckpoint(filepath.Join(dir, "c1"))
	if !ok {
		t.Fatalf("no checkpoint after %d events in %d crashed runs", perRun*runs, runs)
	}
	if behind := perRun*runs - int(ck.State.LastSeq); behind > 2*512 {
		t.Fatalf("the checkpoint is %d events behind the log (at seq %d of %d)", behind, ck.State.LastSeq, perRun*runs)
	}
	v, err := Validate(filepath.Join(dir, "c1"))
	if err != nil {
		t.Fatal(err)
	}
	if v.AfterCheckpoint != int64(perRun*runs)-ck.State.LastSeq {
		t.Fatalf("Validate says %d events after the checkpoint, want %d", v.AfterCheckpoint, int64(perRun*runs)-ck.State.LastSeq)
	}
}

// BenchmarkResumeAfterCrash is BenchmarkResume for a worker that died
// without closing: no checkpoint at close, the events since the last
// periodic checkpoint to scan (up to 511; the metric says how many), and a
// lease that is still live (the same holder takes the next fence at once).
// Each iteration crashes again and the logs are cut back to where they
// were, so every Load scans the same tail.
func BenchmarkResumeAfterCrash(b *testing.B) {
	for _, n := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "projects")
			_, sess := streamedSession(b, dir, n, 100)
			sess.Sync()
			sess.closeFiles() // the crash
			sdir := filepath.Join(dir, "bench")
			v, err := Validate(sdir)
			if err != nil {
				b.Fatal(err)
			}
			sizes := fileSizes(b, sdir)
			// No checkpoint on resume: the tail stays what the crash left.
			resumer, err := New(dir, &Options{Holder: "w", CheckpointEvery: 1 << 30})
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				s := resume(b, resumer)
				b.StopTimer()
				s.closeFiles() // crash again, and undo the resume's appends
				for f, size := range sizes {
					if err := os.Truncate(filepath.Join(sdir, f), size); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(v.AfterCheckpoint), "events-after-checkpoint")
		})
	}
}
