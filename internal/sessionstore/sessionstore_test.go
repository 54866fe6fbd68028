package sessionstore

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
)

func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := New(filepath.Join(t.TempDir(), "projects"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func collect(t *testing.T, s *Session, after int64) []int64 {
	t.Helper()
	var seqs []int64
	if err := s.ReadEvents(after, func(ev contract.Event) error {
		seqs = append(seqs, ev.Seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return seqs
}

func TestCreateAppendReload(t *testing.T) {
	st := newStore(t)
	sess, created, err := st.Create("c1", Meta{Harness: "native", CreatedAt: time.Unix(1, 0).UTC()})
	if err != nil || !created {
		t.Fatalf("Create = %v, %v", created, err)
	}
	for i := 0; i < 5; i++ {
		ev := contract.Event{Kind: contract.KindTextDelta, Text: "x"}
		if err := sess.AppendEvent(&ev); err != nil {
			t.Fatal(err)
		}
		if ev.Seq != int64(i+1) {
			t.Fatalf("seq = %d, want %d", ev.Seq, i+1)
		}
	}
	if err := sess.AppendTranscript(json.RawMessage(`{"role": "user"}`)); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, sess, 3); len(got) != 2 || got[0] != 4 {
		t.Fatalf("after 3: %v", got)
	}
	sess.Close()

	again, created, err := st.Create("c1", Meta{Harness: "other"})
	if err != nil || created {
		t.Fatalf("re-Create = %v, %v", created, err)
	}
	defer again.Close()
	if again.LastSeq() != 5 || again.Meta().Harness != "native" {
		t.Fatalf("reloaded lastSeq=%d meta=%+v", again.LastSeq(), again.Meta())
	}
	tr, err := again.Transcript()
	if err != nil || len(tr) != 1 || string(tr[0]) != `{"role":"user"}` {
		t.Fatalf("transcript = %s, %v", tr, err)
	}
}

func TestTornTailIsCut(t *testing.T) {
	st := newStore(t)
	sess, _, err := st.Create("c1", Meta{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := sess.AppendEvent(&contract.Event{Kind: contract.KindNotice}); err != nil {
			t.Fatal(err)
		}
	}
	sess.Close()
	for name, tail := range map[string]string{
		"unterminated": `{"seq":4,"kind":"no`,
		"bad json":     "{\"seq\":4,\"ki\n",
		"wrong seq":    "{\"seq\":9}\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(st.Root(), "c1", eventsFile)
			good, _ := os.ReadFile(path)
			f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			f.WriteString(tail)
			f.Close()
			s, err := st.Load("c1")
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			defer s.Close()
			if s.LastSeq() != 3 {
				t.Fatalf("lastSeq = %d", s.LastSeq())
			}
			after, _ := os.ReadFile(path)
			if string(after) != string(good) {
				t.Fatalf("tail not cut:\n%s", after)
			}
		})
	}
}

func TestCorruptMiddleIsAnError(t *testing.T) {
	st := newStore(t)
	sess, _, _ := st.Create("c1", Meta{})
	sess.Close()
	path := filepath.Join(st.Root(), "c1", eventsFile)
	os.WriteFile(path, []byte("{\"seq\":1}\ngarbage\n{\"seq\":2}\n"), 0o600)
	if _, err := st.Load("c1"); err == nil {
		t.Fatal("Load accepted a corrupt record in the middle")
	}
}

func TestInvalidIDs(t *testing.T) {
	st := newStore(t)
	for _, id := range []string{"", "..", "../x", "a/b", ".hidden", "a b", "-x"} {
		if _, _, err := st.Create(id, Meta{}); !errors.Is(err, contract.ErrInvalidID) {
			t.Errorf("Create(%q) err = %v", id, err)
		}
		if _, err := st.Load(id); !errors.Is(err, contract.ErrInvalidID) {
			t.Errorf("Load(%q) err = %v", id, err)
		}
	}
	if _, err := st.Load("missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Load(missing) = %v", err)
	}
}

func TestReplayFromEveryPointAcrossReopen(t *testing.T) {
	st := newStore(t)
	sess, _, err := st.Create("c1", Meta{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3*indexStride + 7
	for i := 0; i < n/2; i++ {
		if err := sess.AppendEvent(&contract.Event{Kind: contract.KindTextDelta, Text: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	sess.Close()
	// Half written before a reopen, half after: the index is rebuilt on
	// load and extended on append.
	sess, err = st.Load("c1")
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	for i := n / 2; i < n; i++ {
		if err := sess.AppendEvent(&contract.Event{Kind: contract.KindTextDelta, Text: "y"}); err != nil {
			t.Fatal(err)
		}
	}
	for after := int64(0); after <= n; after++ {
		got := collect(t, sess, after)
		if int64(len(got)) != n-after || (len(got) > 0 && got[0] != after+1) {
			t.Fatalf("after %d: got %d events starting %v", after, len(got), got[:min(1, len(got))])
		}
	}
}

func TestEventSeq(t *testing.T) {
	for line, want := range map[string]int64{
		`{"seq":42,"kind":"x"}`: 42,
		`{"kind":"x","seq":7}`:  7,
		`{"seq":3}`:             3,
	} {
		got, err := eventSeq([]byte(line))
		if err != nil || got != want {
			t.Errorf("eventSeq(%s) = %d, %v", line, got, err)
		}
	}
	for _, bad := range []string{`{"seq":42,"kind":`, `garbage`, `{"seq":"x"}`} {
		if _, err := eventSeq([]byte(bad)); err == nil {
			t.Errorf("eventSeq(%s) accepted", bad)
		}
	}
}
