package sessionstore

import (
	"path/filepath"
	"testing"

	"github.com/talkide/platform/internal/contract"
)

// BenchmarkAppendEvent measures appending one text.delta event (no fsync:
// the log is synced at the end of a turn).
func BenchmarkAppendEvent(b *testing.B) {
	st, err := New(filepath.Join(b.TempDir(), "projects"))
	if err != nil {
		b.Fatal(err)
	}
	sess, _, err := st.Create("bench", Meta{Harness: "native"})
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close()
	b.ReportAllocs()
	for b.Loop() {
		ev := contract.Event{Kind: contract.KindTextDelta, TurnID: "t_0123456789", Text: "a few words of streamed model text"}
		if err := sess.AppendEvent(&ev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplay measures replaying the last 100 events of a 10,000-event
// log, what a reconnecting client costs today (a full scan).
func BenchmarkReplay(b *testing.B) {
	st, err := New(filepath.Join(b.TempDir(), "projects"))
	if err != nil {
		b.Fatal(err)
	}
	sess, _, err := st.Create("bench", Meta{Harness: "native"})
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close()
	for i := 0; i < 10000; i++ {
		if err := sess.AppendEvent(&contract.Event{Kind: contract.KindTextDelta, Text: "some streamed text"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		if err := sess.ReadEvents(9900, func(contract.Event) error { n++; return nil }); err != nil || n != 100 {
			b.Fatal(n, err)
		}
	}
}
