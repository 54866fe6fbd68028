package sessionstore

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/talkide/platform/internal/contract"
)

// A holder that opens a session it still holds under the same name (its
// own earlier opening: a process restarted after a crash, or an idle close
// racing a reopen) takes the next fence at once. The earlier opening is
// fenced off: its release does not give up the new lease, and what it
// appends is ignored.
func TestSameHolderReopenTakesNextFence(t *testing.T) {
	dir, c := clockedDir(t)
	st := newStoreAt(t, dir, "w", c)
	first := mustCreate(t, st, "c1", Meta{})
	appendN(t, first, 2, contract.KindNotice)

	second, err := st.Load("c1")
	if err != nil {
		t.Fatalf("reopen under the same holder: %v", err)
	}
	if second.Fence() <= first.Fence() {
		t.Fatalf("reopened with fence %d, the earlier opening has %d", second.Fence(), first.Fence())
	}
	// The earlier opening writes on (it has not noticed yet) and closes.
	first.AppendEvent(&contract.Event{Kind: contract.KindNotice, Text: "stale"})
	first.Sync()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if err := second.RenewLease(); err != nil {
		t.Fatalf("the earlier opening's close cost the new one its lease: %v", err)
	}
	if _, err := newStoreAt(t, dir, "other", c).Load("c1"); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("another holder took a held lease: %v", err)
	}
	appendN(t, second, 1, contract.KindTextDelta)
	if got := collect(t, second, 0); len(got) != 3 {
		t.Fatalf("events %v, want 3 (the stale one ignored)", got)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	v, err := Validate(filepath.Join(dir, "c1"))
	if err != nil {
		t.Fatal(err)
	}
	if v.LastSeq != 3 || v.Stale != 1 {
		t.Fatalf("validation %+v, want last seq 3 and the stale record counted", v)
	}
}
