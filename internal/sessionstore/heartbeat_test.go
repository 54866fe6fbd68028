package sessionstore

import (
	"errors"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/fakeclock"
)

const window = 10 * time.Second

// beatingStores are two replicas' stores on one volume: a beats (its
// Heartbeat), b reads a's beats the way a registry would give them.
func beatingStores(t *testing.T) (a, b *Store, beats *Heartbeat, c *fakeclock.Clock, beat func()) {
	t.Helper()
	dir, c := clockedDir(t)
	beats = new(Heartbeat)
	var lastBeat time.Time
	beat = func() {
		lastBeat = c.Now()
		beats.Beat(lastBeat, c.Now(), window)
	}
	a, err := New(dir, &Options{Holder: "worker-a", Now: c.Now, Heartbeat: beats})
	if err != nil {
		t.Fatal(err)
	}
	b, err = New(dir, &Options{Holder: "worker-b", Now: c.Now, Heartbeat: new(Heartbeat),
		PeerBeatEnds: func(holder string) time.Time {
			if holder != "worker-a" || lastBeat.IsZero() {
				return time.Time{}
			}
			return lastBeat.Add(window)
		}})
	if err != nil {
		t.Fatal(err)
	}
	return a, b, beats, c, beat
}

func appendOne(s *Session) error {
	return s.AppendEvent(&contract.Event{Kind: contract.KindNotice, Text: "x"})
}

// A crashed replica's conversation is taken over once its last beat's
// window (and the skew) is over, long before its lease expires; the
// replica itself had stopped writing before that.
func TestBeatsEndBeforeTheLease(t *testing.T) {
	a, b, _, c, beat := beatingStores(t)
	beat()
	sa := mustCreate(t, a, "c1", Meta{})
	appendN(t, sa, 2, contract.KindNotice)

	// a dies: no more beats. Its lease runs 30 s; its beats cover it 10.
	c.Advance(window - MaxClockSkew - time.Millisecond)
	if err := appendOne(sa); err != nil {
		t.Fatalf("within its beat window: %v", err)
	}
	c.Advance(time.Millisecond)
	if err := appendOne(sa); !errors.Is(err, ErrFenced) {
		t.Fatalf("written with its beat window over (less the skew): %v", err)
	}
	var held *LeaseHolderError
	c.Advance(2*MaxClockSkew - time.Millisecond)
	if _, err := b.Load("c1"); !errors.As(err, &held) || held.Holder != "worker-a" {
		t.Fatalf("taken before the beat window and the skew were over: %v", err)
	}
	if li, err := b.Lease("c1"); err != nil || !li.Live(c.Now()) || li.BeatEnds.IsZero() {
		t.Fatalf("the lease as b reads it: %+v, %v", li, err)
	}
	c.Advance(time.Millisecond)
	if li, err := b.Lease("c1"); err != nil || li.Live(c.Now()) {
		t.Fatalf("the lease as b reads it: %+v live, %v", li, err)
	}
	if !c.Now().Before(sa.LeaseExpires()) {
		t.Fatal("the test should run inside the lease's TTL")
	}
	b.opts.Heartbeat.Beat(c.Now(), c.Now(), window)
	sb, err := b.Load("c1")
	if err != nil {
		t.Fatalf("a's beats are over: %v", err)
	}
	defer sb.Close()
	if sb.LastSeq() != 3 {
		t.Fatalf("the new holder sees %d events, want the 3 written within the window", sb.LastSeq())
	}
	appendN(t, sb, 1, contract.KindNotice)
}

// A replica that goes on beating keeps its lease however long, and
// renewals keep it past its TTL.
func TestBeatsKeepTheLease(t *testing.T) {
	a, b, _, c, beat := beatingStores(t)
	beat()
	sa := mustCreate(t, a, "c1", Meta{})
	defer sa.Close()
	for range 30 {
		c.Advance(2 * time.Second)
		beat()
		if err := sa.RenewLeaseIfDue(); err != nil {
			t.Fatal(err)
		}
		if err := appendOne(sa); err != nil {
			t.Fatalf("at %s: %v", c.Now(), err)
		}
		if _, err := b.Load("c1"); !errors.Is(err, ErrLeaseHeld) {
			t.Fatalf("taken from a beating holder: %v", err)
		}
	}
}

// After a lapse in its beats a replica never writes under a lease it took
// before, though it beats again: a peer may have taken it meanwhile. It
// reopens the session under a new lease.
func TestBeatsLapseFencesEarlierLeases(t *testing.T) {
	a, _, beats, c, _ := beatingStores(t)
	t0 := c.Now()
	beats.Beat(t0, t0, window)
	sa := mustCreate(t, a, "c1", Meta{})
	// The next beat was stamped in time but its write ended only once the
	// window (less the skew) had closed: a slow volume.
	c.Advance(window - MaxClockSkew)
	beats.Beat(t0.Add(2*time.Second), c.Now(), window)
	if err := appendOne(sa); !errors.Is(err, ErrFenced) {
		t.Fatalf("written under a lease taken before the lapse: %v", err)
	}
	if err := sa.RenewLease(); !errors.Is(err, ErrFenced) {
		t.Fatalf("renewed a lease taken before the lapse: %v", err)
	}
	sa.Close()
	sa2, err := a.Load("c1")
	if err != nil {
		t.Fatal(err)
	}
	defer sa2.Close()
	if err := appendOne(sa2); err != nil {
		t.Fatalf("under the lease taken after the lapse: %v", err)
	}
}

// Before its first beat a replica writes nothing: a peer could read the
// beats of an earlier process under the same name.
func TestNoBeatNoWrite(t *testing.T) {
	a, _, beats, c, _ := beatingStores(t)
	sa := mustCreate(t, a, "c1", Meta{})
	if err := appendOne(sa); !errors.Is(err, ErrFenced) {
		t.Fatalf("written before the first beat: %v", err)
	}
	c.Advance(time.Millisecond)
	beats.Beat(c.Now(), c.Now(), window)
	if err := appendOne(sa); !errors.Is(err, ErrFenced) {
		t.Fatalf("written under a lease taken before the first beat: %v", err)
	}
	sa.Close()
}

// A holder whose beats a peer cannot read (an older replica, a retention
// tool, a removed entry) keeps its lease until it expires, as before.
func TestUnknownBeatsLeaveTheTTL(t *testing.T) {
	dir, c := clockedDir(t)
	a := newStoreAt(t, dir, "worker-a", c)
	b, err := New(dir, &Options{Holder: "worker-b", Now: c.Now, PeerBeatEnds: func(string) time.Time { return time.Time{} }})
	if err != nil {
		t.Fatal(err)
	}
	sa := mustCreate(t, a, "c1", Meta{})
	defer sa.Close()
	c.Advance(DefaultLeaseTTL + MaxClockSkew - time.Millisecond)
	if _, err := b.Load("c1"); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("taken before its expiry and the skew: %v", err)
	}
	c.Advance(time.Millisecond)
	sb, err := b.Load("c1")
	if err != nil {
		t.Fatal(err)
	}
	sb.Close()
}

func TestHeartbeatRuns(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	var h Heartbeat
	if h.allows(t0, t0) {
		t.Fatal("allowed before any beat")
	}
	h.Beat(t0, t0.Add(time.Second), window)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, c := range []struct {
		taken, now time.Duration
		want       bool
	}{
		{0, 2 * time.Second, false},                         // taken before the first beat's write ended
		{time.Second, 2 * time.Second, true},                // after it
		{time.Second, window - MaxClockSkew - 1, true},      // the window less the skew
		{time.Second, window - MaxClockSkew, false},         // over
		{2 * time.Second, window + time.Hour, false},        // long over
		{time.Second, time.Second + time.Millisecond, true}, // at once
	} {
		if got := h.allows(at(c.taken), at(c.now)); got != c.want {
			t.Errorf("taken at +%s, written at +%s: %v, want %v", c.taken, c.now, got, c.want)
		}
	}
	// Beats whose writes end within the window before keep the run.
	h.Beat(at(5*time.Second), at(7*time.Second), window)
	if !h.allows(at(time.Second), at(12*time.Second)) || h.lost(at(time.Second)) {
		t.Fatal("an unbroken run lost a lease")
	}
	// An older beat's write ending late moves nothing back.
	h.Beat(at(3*time.Second), at(8*time.Second), window)
	if !h.allows(at(time.Second), at(12*time.Second)) {
		t.Fatal("a late, older beat shortened the window")
	}
	// One that ends past the window (less the skew) breaks it.
	h.Beat(at(20*time.Second), at(20*time.Second), window)
	if !h.lost(at(time.Second)) || h.allows(at(time.Second), at(21*time.Second)) || !h.allows(at(20*time.Second), at(21*time.Second)) {
		t.Fatal("a lapse kept the leases taken before it")
	}
	var none *Heartbeat
	if !none.allows(t0, t0) || none.lost(t0) {
		t.Fatal("no heartbeat must leave the leases to their expiry")
	}
}
