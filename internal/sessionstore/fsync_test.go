package sessionstore

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
)

// A failed fsync leaves the events not durable: DurableSeq and ReadEvents
// do not move until a later Sync succeeds. Close reports a failed last sync
// and still releases the lease, so that the next owner need not wait for it
// to expire.
func TestFailedFsync(t *testing.T) {
	errDisk := errors.New("disk on fire")
	var failing atomic.Bool
	dir := filepath.Join(t.TempDir(), "projects")
	st, err := New(dir, &Options{Holder: "w1", Fsync: func(f *os.File) error {
		if failing.Load() {
			return errDisk
		}
		return f.Sync()
	}})
	if err != nil {
		t.Fatal(err)
	}
	sess := mustCreate(t, st, "c1", Meta{})
	appendN(t, sess, 2, "a")

	failing.Store(true)
	for i := 0; i < 2; i++ {
		if err := sess.AppendEvent(&contract.Event{Kind: contract.KindTextDelta, Text: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := sess.Sync(); !errors.Is(err, errDisk) {
		t.Fatalf("Sync on a failing disk = %v, want %v", err, errDisk)
	}
	if got := sess.DurableSeq(); got != 2 {
		t.Errorf("DurableSeq after a failed Sync = %d, want 2", got)
	}
	if diff := cmp.Diff([]int64{1, 2}, collect(t, sess, 0)); diff != "" {
		t.Errorf("ReadEvents after a failed Sync (-want +got):\n%s", diff)
	}

	failing.Store(false)
	if err := sess.Sync(); err != nil {
		t.Fatalf("Sync after the disk recovered: %v", err)
	}
	if diff := cmp.Diff([]int64{1, 2, 3, 4}, collect(t, sess, 0)); diff != "" {
		t.Errorf("ReadEvents after the disk recovered (-want +got):\n%s", diff)
	}

	failing.Store(true)
	if err := sess.AppendEvent(&contract.Event{Kind: contract.KindTextDelta, Text: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := sess.Close(); !errors.Is(err, errDisk) {
		t.Fatalf("Close on a failing disk = %v, want %v", err, errDisk)
	}
	if err := sess.Sync(); err != nil {
		t.Errorf("Sync after Close = %v, want nil (nothing left to sync)", err)
	}
	other := newStoreAt(t, dir, "w2", nil)
	again, err := other.Load("c1")
	if err != nil {
		t.Fatalf("another holder cannot take the session after a failed Close: %v", err)
	}
	again.Close()
}
