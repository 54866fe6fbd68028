package replicaset_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/fakeclock"
	"github.com/talkide/platform/internal/replicaset"
	"github.com/talkide/platform/internal/sessionstore"
)

// replica is a worker replica's registry and session store on a shared
// volume, wired as the worker role wires them.
type replica struct {
	reg   *replicaset.Registry
	store *sessionstore.Store
}

func newReplica(t *testing.T, volume, holder string, c *fakeclock.Clock) replica {
	t.Helper()
	beats := new(sessionstore.Heartbeat)
	reg, err := replicaset.New(filepath.Join(volume, "replicas"), holder, &replicaset.Options{Interval: 2 * time.Second, Now: c.Now, OnBeat: beats.Beat})
	if err != nil {
		t.Fatal(err)
	}
	store, err := sessionstore.New(filepath.Join(volume, "projects"), &sessionstore.Options{
		Holder: holder, Addr: "http://127.0.0.1:1", Now: c.Now, Heartbeat: beats, PeerBeatEnds: reg.BeatEnds,
	})
	if err != nil {
		t.Fatal(err)
	}
	return replica{reg, store}
}

func (r replica) beat(t *testing.T) {
	t.Helper()
	if err := r.reg.Publish(func() replicaset.Entry { return replicaset.Entry{Addr: "http://127.0.0.1:1"} }); err != nil {
		t.Fatal(err)
	}
}

// A replica that beats keeps its conversation past any lease's TTL; once
// it stops (a crash), a peer takes the conversation over within the beat
// window and the clock skew, well before the lease would have expired,
// and the crashed replica had stopped writing before that.
func TestCrashedReplicasSessionsMove(t *testing.T) {
	volume, c := t.TempDir(), fakeclock.New(time.Unix(1_000_000, 0))
	a, b := newReplica(t, volume, "worker-a", c), newReplica(t, volume, "worker-b", c)
	a.beat(t)
	b.beat(t)
	c.Advance(time.Millisecond)
	sa, _, err := a.store.Create("c1", sessionstore.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	for range 40 { // 80 s: more than two leases' TTL
		c.Advance(2 * time.Second)
		a.beat(t)
		b.beat(t)
		if err := sa.RenewLeaseIfDue(); err != nil {
			t.Fatal(err)
		}
		if err := sa.AppendEvent(&contract.Event{Kind: contract.KindNotice}); err != nil {
			t.Fatalf("a beating replica could not write: %v", err)
		}
		if _, err := b.store.Load("c1"); !errors.Is(err, sessionstore.ErrLeaseHeld) {
			t.Fatalf("taken from a beating replica: %v", err)
		}
	}

	// a crashes: it beats and renews no more.
	crashed := c.Now()
	var sb *sessionstore.Session
	for sb == nil {
		c.Advance(time.Second)
		b.beat(t)
		if c.Now().Sub(crashed) < replicaset.MinBeatWindow-sessionstore.MaxClockSkew {
			if err := sa.AppendEvent(&contract.Event{Kind: contract.KindNotice}); err != nil {
				t.Fatalf("%s after its last beat: %v", c.Now().Sub(crashed), err)
			}
		} else if err := sa.AppendEvent(&contract.Event{Kind: contract.KindNotice}); !errors.Is(err, sessionstore.ErrFenced) {
			t.Fatalf("%s after its last beat, past its window: written (%v)", c.Now().Sub(crashed), err)
		}
		sb, err = b.store.Load("c1")
		if err != nil && !errors.Is(err, sessionstore.ErrLeaseHeld) {
			t.Fatal(err)
		}
	}
	defer sb.Close()
	took := c.Now().Sub(crashed)
	if took != replicaset.MinBeatWindow+sessionstore.MaxClockSkew {
		t.Fatalf("taken over %s after the crash, want the beat window and the skew, %s", took, replicaset.MinBeatWindow+sessionstore.MaxClockSkew)
	}
	if !c.Now().Before(sa.LeaseExpires()) {
		t.Fatal("the lease had expired anyway: the test shows nothing")
	}
	if sb.LastSeq() != sa.LastSeq() {
		t.Fatalf("the new holder sees %d events, the old one wrote %d", sb.LastSeq(), sa.LastSeq())
	}
}
