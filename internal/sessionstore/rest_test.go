package sessionstore

import (
	"os"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
)

// openFiles counts this process's descriptors.
func openFiles(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// A resting session holds no descriptor; the next append reopens its log
// and lands after what was there, and the session reads back whole.
func TestRestClosesTheLogs(t *testing.T) {
	st := newStore(t)
	sess := mustCreate(t, st, "c1", Meta{Harness: "native", CreatedAt: time.Unix(1, 0).UTC()})
	appendText := func() {
		t.Helper()
		ev := contract.Event{Kind: contract.KindTextDelta, Text: "x"}
		if err := sess.AppendEvent(&ev); err != nil {
			t.Fatal(err)
		}
	}
	appendText()
	if sess.Rest() {
		t.Fatal("a session with appends not yet synced rested")
	}
	if err := sess.Sync(); err != nil {
		t.Fatal(err)
	}
	before := openFiles(t)
	if !sess.Rest() {
		t.Fatal("a synced session did not rest")
	}
	if got := openFiles(t); got != before-3 {
		t.Errorf("resting closed %d descriptors, want 3", before-got)
	}
	if err := sess.RenewLease(); err != nil {
		t.Errorf("a resting session lost its lease: %v", err)
	}
	appendText()
	appendTranscriptSynced(t, sess, `{"role":"user"}`)
	if got := collect(t, sess, 0); len(got) != 2 || got[1] != 2 {
		t.Fatalf("events after a rest: %v", got)
	}
	sess.Rest()
	sess.Close()
	again := mustCreate(t, st, "c1", Meta{})
	defer again.Close()
	if again.LastSeq() != 2 {
		t.Errorf("reopened after rests: last seq %d, want 2", again.LastSeq())
	}
	if tr, err := again.Transcript(); err != nil || len(tr) != 1 {
		t.Errorf("transcript after rests: %d records, %v", len(tr), err)
	}
}
