package sessionstore

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/fakeclock"
)

func newStoreAt(t testing.TB, dir, holder string, c *fakeclock.Clock) *Store {
	t.Helper()
	opts := &Options{Holder: holder}
	if c != nil {
		opts.Now = c.Now
	}
	s, err := New(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newStore(t testing.TB) *Store {
	t.Helper()
	return newStoreAt(t, filepath.Join(t.TempDir(), "projects"), "test-worker", nil)
}

// clockedDir is a fresh projects directory for the stores of a test and
// the fake clock they share.
func clockedDir(t *testing.T) (string, *fakeclock.Clock) {
	return filepath.Join(t.TempDir(), "projects"), fakeclock.New(time.Unix(1_000_000, 0))
}

func appendN(t testing.TB, s *Session, n int, kind string) {
	t.Helper()
	for i := 0; i < n; i++ {
		if err := s.AppendEvent(&contract.Event{Kind: kind, Text: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
}

// appendTranscriptSynced appends the transcript record rec to s and syncs
// it.
func appendTranscriptSynced(t testing.TB, s *Session, rec string) {
	t.Helper()
	if err := s.AppendTranscript(json.RawMessage(rec), false); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
}

// mustCreate creates (or opens) the session id in st; an error fails the
// test.
func mustCreate(t testing.TB, st *Store, id string, m Meta) *Session {
	t.Helper()
	s, _, err := st.Create(id, m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func collect(t testing.TB, s *Session, after int64) []int64 {
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
	if sess.DurableSeq() != 0 {
		t.Fatalf("events are durable before Sync: %d", sess.DurableSeq())
	}
	if got := collect(t, sess, 0); len(got) != 0 {
		t.Fatalf("ReadEvents returned events that are not durable: %v", got)
	}
	appendTranscriptSynced(t, sess, `{"role": "user"}`)
	if got := collect(t, sess, 3); len(got) != 2 || got[0] != 4 {
		t.Fatalf("after 3: %v", got)
	}
	sess.Close()

	again, created, err := st.Create("c1", Meta{Harness: "other"})
	if err != nil || created {
		t.Fatalf("re-Create = %v, %v", created, err)
	}
	defer again.Close()
	if again.LastSeq() != 5 || again.DurableSeq() != 5 || again.Meta().Harness != "native" {
		t.Fatalf("reloaded lastSeq=%d meta=%+v", again.LastSeq(), again.Meta())
	}
	tr, err := again.Transcript()
	if err != nil || len(tr) != 1 || string(tr[0]) != `{"role":"user"}` {
		t.Fatalf("transcript = %s, %v", tr, err)
	}
	// The files are JSON lines a standard tool reads.
	b, _ := os.ReadFile(filepath.Join(st.Root(), "c1", eventsFile))
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !json.Valid([]byte(line)) {
			t.Fatalf("not a JSON line: %s", line)
		}
	}
}

func TestTornTailIsCut(t *testing.T) {
	for name, tail := range map[string]string{
		"unterminated":  `{"c":"12345678","f":1,"r":{"seq":4`,
		"bad checksum":  `{"c":"00000000","f":1,"r":{"seq":4,"kind":"x"}}` + "\n",
		"not a record":  "garbage\n",
		"half a record": string(encodeRecord(1, []byte(`{"seq":4,"kind":"notice"}`), ""))[:20],
	} {
		t.Run(name, func(t *testing.T) {
			st := newStore(t)
			sess := mustCreate(t, st, "c1", Meta{})
			appendN(t, sess, 3, contract.KindNotice)
			sess.Close()
			path := filepath.Join(st.Root(), "c1", eventsFile)
			good, _ := os.ReadFile(path)
			f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			f.WriteString(tail)
			f.Close()
			os.Remove(filepath.Join(st.Root(), "c1", checkpointFile)) // force a full scan
			s, err := st.Load("c1")
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if s.LastSeq() != 3 {
				t.Fatalf("lastSeq = %d", s.LastSeq())
			}
			appendN(t, s, 1, contract.KindNotice)
			s.Close()
			after, _ := os.ReadFile(path)
			if !strings.HasPrefix(string(after), string(good)) || strings.Contains(string(after), tail) {
				t.Fatalf("tail not cut:\n%s", after)
			}
			s, err = st.Load("c1")
			if err != nil || s.LastSeq() != 4 {
				t.Fatalf("reload after repair: %d, %v", s.LastSeq(), err)
			}
			s.Close()
		})
	}
}

func TestCorruptMiddleIsAnError(t *testing.T) {
	st := newStore(t)
	sess, _, _ := st.Create("c1", Meta{})
	appendN(t, sess, 3, contract.KindNotice)
	sess.Close()
	path := filepath.Join(st.Root(), "c1", eventsFile)
	b, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(b), "\n")
	lines[2] = strings.Replace(lines[2], "notice", "notica", 1)
	os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600)
	os.Remove(filepath.Join(st.Root(), "c1", checkpointFile))
	if _, err := st.Load("c1"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Load of a log with a corrupt middle record: %v", err)
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
	sess := mustCreate(t, st, "c1", Meta{})
	const n = 3*indexStride + 7
	appendN(t, sess, n/2, contract.KindTextDelta)
	sess.Close()
	// Half written before a reopen (checkpointed), half after: the index
	// comes back from the checkpoint and grows on append.
	sess, err := st.Load("c1")
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	appendN(t, sess, n-n/2, contract.KindTextDelta)
	for after := int64(0); after <= n; after++ {
		got := collect(t, sess, after)
		if int64(len(got)) != n-after || (len(got) > 0 && got[0] != after+1) {
			t.Fatalf("after %d: got %d events starting %v", after, len(got), got[:min(1, len(got))])
		}
	}
}

func TestStateSurvivesReopenWithAndWithoutCheckpoint(t *testing.T) {
	for _, withCheckpoint := range []bool{true, false} {
		st := newStore(t)
		sess, _, _ := st.Create("c1", Meta{})
		evs := []contract.Event{
			{Kind: contract.KindUserMessage, TurnID: "t1", ClientMessageID: "m1"},
			{Kind: contract.KindTurnStarted, TurnID: "t1"},
			{Kind: contract.KindTurnFinished, TurnID: "t1"},
			{Kind: contract.KindUserMessage, TurnID: "t2", ClientMessageID: "m2"},
			{Kind: contract.KindTurnStarted, TurnID: "t2"},
		}
		for i := range evs {
			if err := sess.AppendEvent(&evs[i]); err != nil {
				t.Fatal(err)
			}
		}
		sess.Close()
		if !withCheckpoint {
			os.Remove(filepath.Join(st.Root(), "c1", checkpointFile))
		}
		again, err := st.Load("c1")
		if err != nil {
			t.Fatal(err)
		}
		got := again.State()
		again.Close()
		if got.LastSeq != 5 || got.Turns != 2 || got.OpenTurn != "t2" || len(got.Recent) != 2 || got.Recent[1] != (RecentMessage{"m2", "t2", 4}) {
			t.Errorf("checkpoint=%v: state = %+v", withCheckpoint, got)
		}
	}
}

func TestCompactionPoint(t *testing.T) {
	st := newStore(t)
	sess, _, _ := st.Create("c1", Meta{})
	for i, rec := range []string{`{"n":1}`, `{"n":2}`, `{"summary":true}`, `{"n":3}`} {
		if err := sess.AppendTranscript(json.RawMessage(rec), i == 2); err != nil {
			t.Fatal(err)
		}
	}
	check := func(s *Session) {
		t.Helper()
		tr, err := s.Transcript()
		if err != nil || len(tr) != 2 || string(tr[0]) != `{"summary":true}` || string(tr[1]) != `{"n":3}` {
			t.Fatalf("transcript from the compaction point = %s, %v", tr, err)
		}
	}
	check(sess)
	sess.Close()
	again, err := st.Load("c1")
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	check(again)
}

func TestOutbox(t *testing.T) {
	st := newStore(t)
	sess, _, _ := st.Create("c1", Meta{})
	var ends []int64
	for _, key := range []string{"a", "b", "c"} {
		end, err := sess.AppendReport(contract.Report{IdempotencyKey: key, Kind: contract.ReportActivity, ConversationID: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, end)
	}
	if p, _ := sess.PendingReports(); len(p) != 0 {
		t.Fatalf("reports pending before they are durable: %d", len(p))
	}
	sess.Sync()
	p, err := sess.PendingReports()
	if err != nil || len(p) != 3 || p[2].End != ends[2] || p[0].Report.IdempotencyKey != "a" {
		t.Fatalf("pending = %+v, %v (ends %v)", p, err, ends)
	}
	if err := sess.AckReports(p[0].End); err != nil {
		t.Fatal(err)
	}
	sess.Close()
	again, _ := st.Load("c1")
	defer again.Close()
	p, _ = again.PendingReports()
	if len(p) != 2 || p[0].Report.IdempotencyKey != "b" {
		t.Fatalf("after ack and reopen: %+v", p)
	}
}

func TestLeaseOneOwner(t *testing.T) {
	dir, c := clockedDir(t)
	a := newStoreAt(t, dir, "worker-a", c)
	b := newStoreAt(t, dir, "worker-b", c)
	sa := mustCreate(t, a, "c1", Meta{})
	var held *LeaseHolderError
	if _, err := b.Load("c1"); !errors.As(err, &held) || held.Holder != "worker-a" {
		t.Fatalf("second owner: %v", err)
	}
	// Renewal keeps it; release hands it over at once.
	c.Advance(DefaultLeaseTTL / 2)
	if err := sa.RenewLease(); err != nil {
		t.Fatal(err)
	}
	c.Advance(DefaultLeaseTTL / 2)
	if _, err := b.Load("c1"); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("taken over a renewed lease: %v", err)
	}
	appendN(t, sa, 2, contract.KindNotice)
	if err := sa.Close(); err != nil {
		t.Fatal(err)
	}
	sb, err := b.Load("c1")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	if sb.Fence() <= 1 || sb.LastSeq() != 2 {
		t.Fatalf("fence %d lastSeq %d", sb.Fence(), sb.LastSeq())
	}
	sb.Close()
}

func TestExpiredOwnerIsFencedOff(t *testing.T) {
	dir, c := clockedDir(t)
	a := newStoreAt(t, dir, "worker-a", c)
	b := newStoreAt(t, dir, "worker-b", c)
	sa, _, _ := a.Create("c1", Meta{})
	appendN(t, sa, 3, contract.KindNotice)

	// A stops renewing (a long GC pause, a partition). Past expiry plus
	// skew, B takes over.
	c.Advance(DefaultLeaseTTL + MaxClockSkew + time.Second)
	sb, err := b.Load("c1")
	if err != nil {
		t.Fatalf("take over an expired lease: %v", err)
	}
	// A wakes up: its own clock says the lease is gone, so it refuses.
	if err := sa.AppendEvent(&contract.Event{Kind: contract.KindNotice}); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale owner appended: %v", err)
	}
	if err := sa.RenewLease(); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale owner renewed: %v", err)
	}
	appendN(t, sb, 2, contract.KindTextDelta)

	// Even a stale owner that ignored its clock and appended raw records
	// after the takeover is ignored by every reader: its fence is lower.
	stale := encodeRecord(sa.Fence(), []byte(`{"seq":6,"kind":"notice","conversation_id":"c1","time":"2026-01-01T00:00:00Z"}`), "")
	f, _ := os.OpenFile(filepath.Join(dir, "c1", eventsFile), os.O_APPEND|os.O_WRONLY, 0)
	f.Write(stale)
	f.Close()
	appendN(t, sb, 1, contract.KindTextDelta)
	if got := collect(t, sb, 0); len(got) != 6 || got[5] != 6 {
		t.Fatalf("events seen by the new owner: %v", got)
	}
	sb.Close()
	os.Remove(filepath.Join(dir, "c1", checkpointFile))
	ins, err := b.Inspect("c1")
	if err != nil {
		t.Fatal(err)
	}
	defer ins.Close()
	var kinds []string
	ins.ReadEvents(0, func(ev contract.Event) error { kinds = append(kinds, ev.Kind); return nil })
	if len(kinds) != 6 || kinds[5] != contract.KindTextDelta {
		t.Fatalf("a full scan accepted the stale record: %v", kinds)
	}
}

func TestConcurrentTakeoverHasOneWinner(t *testing.T) {
	dir, c := clockedDir(t)
	first := newStoreAt(t, dir, "w0", c)
	s0, _, _ := first.Create("c1", Meta{})
	s0.Close()
	const n = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	var owners []string
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			st := newStoreAt(t, dir, "w"+string(rune('a'+i)), c)
			s, err := st.Load("c1")
			if err != nil {
				if !errors.Is(err, ErrLeaseHeld) {
					t.Errorf("Load: %v", err)
				}
				return
			}
			mu.Lock()
			owners = append(owners, s.store.opts.Holder)
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	if len(owners) != 1 {
		t.Fatalf("%d owners at once: %v", len(owners), owners)
	}
}
