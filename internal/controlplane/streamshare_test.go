package controlplane_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/poll"
	"github.com/talkide/platform/internal/store"
)

// flakyCounts is a store's stream counts whose reads fail while failReads
// is set: the store unreachable, for what the sharing does then.
type flakyCounts struct {
	store.StreamCounts
	failReads atomic.Bool
}

func (f *flakyCounts) OtherStreamCounts(ctx context.Context, replica string, since time.Time) ([]store.StreamCount, error) {
	if f.failReads.Load() {
		return nil, errors.New("the database is unreachable")
	}
	return f.StreamCounts.OtherStreamCounts(ctx, replica, since)
}

// TestStreamCountsShared: a control-plane on a real store's stream counts,
// beside another replica that publishes into the same store. It publishes
// its own streams, refuses the user's stream that the other replica's one
// puts over the cap, counts only its own once the store cannot be read for
// longer than the TTL, and withdraws its counts when told.
func TestStreamCountsShared(t *testing.T) {
	var counts *flakyCounts
	h := newHarness(t, harnessOptions{
		worker: fakeOptions{stream: newEventLog(10).serve},
		streams: controlplane.Options{MaxStreamsPerUser: 2,
			StreamShareInterval: 20 * time.Millisecond, StreamShareTTL: 300 * time.Millisecond},
		shareStreams: func(st store.Store) store.StreamCounts {
			counts = &flakyCounts{StreamCounts: st.(store.StreamCounts)}
			return counts
		},
	})
	h.insertConversation("a", user, env)
	h.insertConversation("b", user, env)
	ctx := t.Context()

	// The other replica holds one stream of the user, heartbeating.
	other, stopOther := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for other.Err() == nil {
			_, err := counts.PublishStreamCounts(ctx, "other", time.Now(),
				[]store.StreamCount{{Kind: store.StreamsOfUser, Subject: user, Streams: 1}}, true)
			if err != nil && other.Err() == nil {
				t.Error(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	defer func() { stopOther(); wg.Wait() }()

	b1 := h.browser("/api/conversations/a/stream", "")
	defer b1.stop()
	// Its stream is published: a third replica sees both.
	poll.Until(t, "the replica's stream published", func() bool {
		cs, err := counts.OtherStreamCounts(ctx, "third", time.Now().Add(-time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.Kind == store.StreamsOfUser && c.Subject == user {
				return c.Streams == 2
			}
		}
		return false
	})
	// A second stream of the user is refused once the other's is read:
	// one here, one there.
	poll.Until(t, "the second stream refused", func() bool {
		resp, stop := h.openStream("/api/conversations/b/stream", nil)
		defer stop()
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			if resp.Header.Get("Retry-After") != "5" {
				t.Errorf("Retry-After %q, want 5", resp.Header.Get("Retry-After"))
			}
			return true
		}
		return false
	})
	resp, body := h.do(http.MethodGet, "/api/conversations/b/stream", "", nil)
	wantError(t, resp, body, http.StatusTooManyRequests, contract.CodeTooManyStreams)

	// The store unreachable: once the other's figure is older than the
	// TTL, the replica counts its own streams only.
	counts.failReads.Store(true)
	var b2 *browser
	poll.Until(t, "the second stream admitted with the store unreadable", func() bool {
		resp, stop := h.openStream("/api/conversations/b/stream", nil)
		if resp.StatusCode == http.StatusOK {
			b2 = &browser{resp: resp, stop: stop}
			return true
		}
		resp.Body.Close()
		stop()
		return false
	})
	defer b2.stop()
	counts.failReads.Store(false)

	// Withdrawn (as a shutdown does once its streams are gone), nothing
	// of it is counted elsewhere.
	b1.stop()
	b2.stop()
	poll.Until(t, "the slots given back", func() bool { return h.cp.StreamsOpen() == 0 })
	stopOther()
	wg.Wait()
	if err := counts.WithdrawStreamCounts(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if err := h.cp.WithdrawStreamCounts(ctx); err != nil {
		t.Fatal(err)
	}
	// The sharing still runs and may publish again after the withdrawal:
	// what it publishes then is nothing, the streams being gone.
	poll.Until(t, "nothing counted after the withdrawal", func() bool {
		cs, err := counts.OtherStreamCounts(ctx, "third", time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		return len(cs) == 0
	})
}
