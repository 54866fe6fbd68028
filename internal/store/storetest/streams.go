package storetest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/store"
)

// The tests of the stream counts the control-plane replicas share.
var streamTests = map[string]func(*testing.T, store.Store){
	"StreamCounts":           testStreamCounts,
	"StreamCountsExpire":     testStreamCountsExpire,
	"StreamCountsBadKind":    testStreamCountsBadKind,
	"StreamCountsConcurrent": testStreamCountsConcurrent,
}

func streamCounts(t *testing.T, s store.Store) store.StreamCounts {
	t.Helper()
	sc, ok := s.(store.StreamCounts)
	if !ok {
		t.Fatalf("%T does not implement store.StreamCounts", s)
	}
	return sc
}

func user(id string, n int64) store.StreamCount {
	return store.StreamCount{Kind: store.StreamsOfUser, Subject: id, Streams: n}
}

func conv(id string, n int64) store.StreamCount {
	return store.StreamCount{Kind: store.StreamsOfConversation, Subject: id, Streams: n}
}

// others returns what sc counts on the replicas but replica since since,
// sorted.
func others(t *testing.T, sc store.StreamCounts, replica string, since time.Time) []store.StreamCount {
	t.Helper()
	cs, err := sc.OtherStreamCounts(t.Context(), replica, since)
	must(t, err)
	slices.SortFunc(cs, func(a, b store.StreamCount) int {
		return strings.Compare(a.Kind+"\x00"+a.Subject, b.Kind+"\x00"+b.Subject)
	})
	return cs
}

func publish(t *testing.T, sc store.StreamCounts, replica string, at time.Time, whole bool, cs ...store.StreamCount) bool {
	t.Helper()
	known, err := sc.PublishStreamCounts(t.Context(), replica, at, cs, whole)
	must(t, err)
	return known
}

func wantCounts(t *testing.T, what string, got []store.StreamCount, want ...store.StreamCount) {
	t.Helper()
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

func testStreamCounts(t *testing.T, s store.Store) {
	sc := streamCounts(t, s)
	wantCounts(t, "an empty store", others(t, sc, "a", t0))

	if publish(t, sc, "a", at(0), false, user("u1", 1)) {
		t.Error("a change published by a replica the store does not know: known, want not")
	}
	wantCounts(t, "after a change of an unknown replica", others(t, sc, "z", t0))

	if !publish(t, sc, "a", at(0), true, user("u1", 2), conv("c1", 2), user("u0", 0)) {
		t.Error("a whole publication: not known")
	}
	publish(t, sc, "b", at(0), true, user("u1", 1), conv("c2", 1))
	wantCounts(t, "a sees b's", others(t, sc, "a", t0), conv("c2", 1), user("u1", 1))
	wantCounts(t, "b sees a's", others(t, sc, "b", t0), conv("c1", 2), user("u1", 2))
	wantCounts(t, "a third sees both, summed", others(t, sc, "c", t0), conv("c1", 2), conv("c2", 1), user("u1", 3))

	// Changes: one count down, one gone, one new; what is not named stays.
	if !publish(t, sc, "a", at(time.Second), false, user("u1", 1), conv("c1", 0), conv("c3", 1), conv("c4", 0)) {
		t.Error("a change of a known replica: not known")
	}
	wantCounts(t, "after a's changes", others(t, sc, "c", t0), conv("c2", 1), conv("c3", 1), user("u1", 2))

	// A whole publication replaces everything the replica had.
	publish(t, sc, "a", at(2*time.Second), true, user("u9", 1))
	wantCounts(t, "after a's whole publication", others(t, sc, "c", t0), conv("c2", 1), user("u1", 1), user("u9", 1))
	publish(t, sc, "a", at(3*time.Second), true)
	wantCounts(t, "a publishing nothing", others(t, sc, "c", t0), conv("c2", 1), user("u1", 1))

	// The same subject under both kinds is two counts.
	publish(t, sc, "a", at(3*time.Second), false, user("x", 1), conv("x", 3))
	wantCounts(t, "one id, both kinds", others(t, sc, "b", t0), conv("x", 3), user("x", 1))

	must(t, sc.WithdrawStreamCounts(t.Context(), "b"))
	must(t, sc.WithdrawStreamCounts(t.Context(), "never-seen"))
	wantCounts(t, "after b withdrew", others(t, sc, "c", t0), conv("x", 3), user("x", 1))
	if publish(t, sc, "b", at(4*time.Second), false, user("u1", 5)) {
		t.Error("a change of a withdrawn replica: known, want not")
	}
	wantCounts(t, "after a withdrawn replica's change", others(t, sc, "c", t0), conv("x", 3), user("x", 1))
}

func testStreamCountsExpire(t *testing.T, s store.Store) {
	sc := streamCounts(t, s)
	publish(t, sc, "old", at(0), true, user("u1", 1), conv("c1", 1))
	publish(t, sc, "new", at(10*time.Second), true, user("u1", 1))

	// A heartbeat before since is not counted, one at since is.
	wantCounts(t, "since the old heartbeat", others(t, sc, "me", at(0)), conv("c1", 1), user("u1", 2))
	wantCounts(t, "since after it", others(t, sc, "me", at(time.Millisecond)), user("u1", 1))

	// A heartbeat keeps the counts alive without changing them.
	publish(t, sc, "old", at(20*time.Second), false)
	wantCounts(t, "after the old one's heartbeat", others(t, sc, "me", at(15*time.Second)), conv("c1", 1), user("u1", 1))

	n, err := sc.SweepStreamCounts(t.Context(), at(20*time.Second))
	must(t, err)
	if n != 1 {
		t.Errorf("swept %d replicas, want 1 (new, at 10 s)", n)
	}
	wantCounts(t, "after the sweep", others(t, sc, "me", t0), conv("c1", 1), user("u1", 1))
	// A swept replica's change is refused: it publishes whole again.
	if publish(t, sc, "new", at(30*time.Second), false, user("u2", 1)) {
		t.Error("a swept replica's change: known, want not")
	}
	publish(t, sc, "new", at(30*time.Second), true, user("u2", 1))
	wantCounts(t, "after it published whole", others(t, sc, "me", t0), conv("c1", 1), user("u1", 1), user("u2", 1))

	n, err = sc.SweepStreamCounts(t.Context(), at(time.Hour))
	must(t, err)
	if n != 2 {
		t.Errorf("swept %d replicas, want 2", n)
	}
	wantCounts(t, "after sweeping all", others(t, sc, "me", t0))
	// Nothing is left of them: published whole again from nothing, a
	// replica has only what it publishes.
	publish(t, sc, "old", at(time.Hour), true)
	wantCounts(t, "a swept replica back", others(t, sc, "me", t0))
}

func testStreamCountsBadKind(t *testing.T, s store.Store) {
	sc := streamCounts(t, s)
	publish(t, sc, "a", at(0), true, user("u1", 1))
	for _, whole := range []bool{false, true} {
		_, err := sc.PublishStreamCounts(t.Context(), "a", at(time.Minute), []store.StreamCount{conv("c1", 1), {Kind: "tenant", Subject: "t", Streams: 1}}, whole)
		if err == nil || !strings.Contains(err.Error(), `"tenant"`) {
			t.Errorf("whole %v: a change of kind tenant: error %v, want one naming the kind", whole, err)
		}
	}
	// Nothing changed, the heartbeat neither.
	wantCounts(t, "after the refused changes", others(t, sc, "me", t0), user("u1", 1))
	wantCounts(t, "the heartbeat", others(t, sc, "me", at(time.Second)))
}

// testStreamCountsConcurrent: replicas publishing while others sweep them
// leave no count without its heartbeat: whatever interleaving, a replica's
// last whole publication is what is counted.
func testStreamCountsConcurrent(t *testing.T, s store.Store) {
	sc := streamCounts(t, s)
	const replicas, rounds = 4, 20
	var wg sync.WaitGroup
	for r := range replicas {
		id := fmt.Sprintf("r%d", r)
		wg.Go(func() {
			for i := range rounds {
				at := at(time.Duration(i) * time.Second)
				known, err := sc.PublishStreamCounts(t.Context(), id, at, []store.StreamCount{user("u", int64(i+1)), conv(id, 1)}, false)
				if err == nil && !known {
					_, err = sc.PublishStreamCounts(t.Context(), id, at, []store.StreamCount{user("u", int64(i+1)), conv(id, 1)}, true)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range rounds {
			if _, err := sc.SweepStreamCounts(t.Context(), at(time.Duration(i)*time.Second)); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	// Each replica's last publication (at rounds-1 s) is a heartbeat no
	// sweep reached, and its counts are there in full.
	want := []store.StreamCount{}
	for r := range replicas {
		want = append(want, conv(fmt.Sprintf("r%d", r), 1))
	}
	want = append(want, user("u", replicas*rounds))
	wantCounts(t, "after the race", others(t, sc, "me", t0), want...)
}
