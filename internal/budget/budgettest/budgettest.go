// Package budgettest is the conformance suite of budget.Store: every
// implementation (SQLite, PostgreSQL) runs it from its own tests.
package budgettest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/budget"
)

// RunOn runs the suite on a backend whose databases are named by a string:
// where names a new, empty database for each test, and open opens a store
// on one; the test of admissions from two processes opens the same database
// twice.
func RunOn[S budget.Store](t *testing.T, where func(t *testing.T) string, open func(t *testing.T, where string) S) {
	wheres := map[budget.Store]string{} // the suite's subtests run one at a time
	Run(t, func(t *testing.T) budget.Store {
		w := where(t)
		s := open(t, w)
		wheres[s] = w
		return s
	}, func(t *testing.T, s budget.Store) budget.Store {
		return open(t, wheres[s])
	})
}

// Run runs the suite. open returns a new, empty store for each test; when
// shared is not nil it returns a second store on the same database, for the
// test of admissions from two processes.
func Run(t *testing.T, open func(t *testing.T) budget.Store, shared func(t *testing.T, s budget.Store) budget.Store) {
	t.Run("Limits", func(t *testing.T) { testLimits(t, open(t)) })
	t.Run("Reserve", func(t *testing.T) { testReserve(t, open(t)) })
	t.Run("Settle", func(t *testing.T) { testSettle(t, open(t)) })
	t.Run("SettleBatch", func(t *testing.T) { testSettleBatch(t, open(t)) })
	t.Run("Slice", func(t *testing.T) { testSlice(t, open(t)) })
	t.Run("Renew", func(t *testing.T) { testRenew(t, open(t)) })
	t.Run("Collect", func(t *testing.T) { testCollect(t, open(t)) })
	t.Run("Ledger", func(t *testing.T) { testLedger(t, open(t)) })
	t.Run("Serialised", func(t *testing.T) {
		a := open(t)
		b := a
		if shared != nil {
			b = shared(t, a)
		}
		testSerialised(t, a, b)
	})
}

// t0 is a fixed time, in the middle of a day, at a whole minute.
var t0 = time.Date(2026, 11, 30, 14, 7, 0, 0, time.UTC)

func testLimits(t *testing.T, s budget.Store) {
	ctx := t.Context()
	ls := []budget.Limit{
		{Subject: budget.User("u1"), Kind: budget.SpendPerDay, Max: int64(5 * budget.Dollar), Hard: true, UpdatedAt: t0},
		{Subject: budget.User("u1"), Kind: budget.Concurrent, Max: 4, UpdatedAt: t0},
		{Subject: budget.Tenant("acme"), Kind: budget.SpendPerMonth, Max: int64(1000 * budget.Dollar), UpdatedAt: t0},
		{Subject: budget.Env("acme", "prod"), Kind: budget.RequestsPerMinute, Max: 60, UpdatedAt: t0},
		{Subject: budget.User("U2"), Kind: budget.TokensPerDay, Max: 1e6, UpdatedAt: t0},
	}
	for _, l := range ls {
		if err := s.PutBudgetLimit(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	// Replace one.
	ls[1].Max, ls[1].UpdatedAt = 8, t0.Add(time.Second)
	if err := s.PutBudgetLimit(ctx, ls[1]); err != nil {
		t.Fatal(err)
	}
	all, err := s.BudgetLimits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Ordered by scope, subject (bytes: "U2" < "u1"), kind.
	want := []budget.Limit{ls[3], ls[2], ls[4], ls[1], ls[0]}
	if diff := cmp.Diff(want, all); diff != "" {
		t.Errorf("all limits (-want +got):\n%s", diff)
	}
	some, err := s.BudgetLimits(ctx, budget.User("u1"), budget.Env("acme", "prod"), budget.Tenant("nobody"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]budget.Limit{ls[3], ls[1], ls[0]}, some); diff != "" {
		t.Errorf("some limits (-want +got):\n%s", diff)
	}
	if err := s.DeleteBudgetLimit(ctx, budget.User("u1"), budget.Concurrent); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteBudgetLimit(ctx, budget.User("u1"), budget.Concurrent); err != nil {
		t.Fatalf("deleting a missing limit: %v", err)
	}
	some, err = s.BudgetLimits(ctx, budget.User("u1"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]budget.Limit{ls[0]}, some); diff != "" {
		t.Errorf("after delete (-want +got):\n%s", diff)
	}
}

func reservation(id, user string, cost budget.Money, at time.Time) budget.Reservation {
	return budget.Reservation{ID: id, User: user, Tenant: "acme", Env: "prod", Cost: cost, Tokens: int64(cost) / 1000,
		CreatedAt: at, ExpiresAt: at.Add(10 * time.Minute)}
}

func query(now time.Time, subjects ...budget.Subject) budget.SnapshotQuery {
	return budget.SnapshotQuery{Subjects: subjects, Now: now,
		DaysFrom:    time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC),
		FiveMinFrom: now.Add(-5*time.Hour - 5*time.Minute).Truncate(5 * time.Minute),
		MinuteFrom:  now.Truncate(time.Minute)}
}

// reserve reserves r and returns the snapshot it was admitted on.
func reserve(t *testing.T, s budget.Store, r budget.Reservation, q budget.SnapshotQuery) *budget.Snapshot {
	t.Helper()
	var got *budget.Snapshot
	if err := s.ReserveBudget(t.Context(), r, q, func(snap *budget.Snapshot, _ *budget.Reservation) error { got = snap; return nil }); err != nil {
		t.Fatalf("reserve %s: %v", r.ID, err)
	}
	return got
}

func testReserve(t *testing.T, s budget.Store) {
	ctx := t.Context()
	u1, acme, env := budget.User("u1"), budget.Tenant("acme"), budget.Env("acme", "prod")
	q := query(t0, u1, acme, env)

	snap := reserve(t, s, reservation("r1", "u1", 100, t0), q)
	if snap.Exists || snap.Own != nil || len(snap.Buckets) != 0 || snap.Held[u1] != (budget.Held{}) {
		t.Errorf("first snapshot = %+v, want empty", snap)
	}
	reserve(t, s, reservation("r2", "u1", 30, t0), q)
	r3 := reservation("r3", "u2", 7, t0)
	r3.Env = "dev"
	reserve(t, s, r3, query(t0, budget.User("u2"), acme, budget.Env("acme", "dev")))

	// A refusal writes nothing and returns admit's error as it is.
	refused := errors.New("no")
	err := s.ReserveBudget(ctx, reservation("r4", "u1", 1, t0), q, func(*budget.Snapshot, *budget.Reservation) error { return refused })
	if err != refused {
		t.Fatalf("refused reserve: err = %v, want admit's error", err)
	}

	// r1 again (an extension): its own reservation is apart from the rest.
	snap = reserve(t, s, reservation("r1", "u1", 250, t0.Add(time.Second)), q)
	wantHeld := map[budget.Subject]budget.Held{
		u1:   {Cost: 30, Tokens: 0, Count: 1},
		acme: {Cost: 37, Tokens: 0, Count: 2},
		env:  {Cost: 30, Tokens: 0, Count: 1},
	}
	if diff := cmp.Diff(wantHeld, snap.Held); diff != "" {
		t.Errorf("held (-want +got):\n%s", diff)
	}
	if !snap.Exists || snap.Own == nil || snap.Own.Cost != 100 {
		t.Errorf("own = %+v (exists %v), want r1 holding 100", snap.Own, snap.Exists)
	}
	// Requests of the minute: r1 and r2 for u1, env, acme; r3 for acme only
	// (with u2 and acme/dev); the extension and the refusal count nothing.
	snap = reserve(t, s, reservation("r5", "u1", 1, t0.Add(2*time.Second)), q)
	var minute []budget.Bucket
	for _, b := range snap.Buckets {
		if b.Size == budget.BucketMinute {
			minute = append(minute, b)
		}
	}
	wantMinute := []budget.Bucket{
		{Subject: acme, Size: budget.BucketMinute, Start: t0, Requests: 3},
		{Subject: env, Size: budget.BucketMinute, Start: t0, Requests: 2},
		{Subject: u1, Size: budget.BucketMinute, Start: t0, Requests: 2},
	}
	if diff := cmp.Diff(wantMinute, minute, sortBuckets); diff != "" {
		t.Errorf("minute buckets (-want +got):\n%s", diff)
	}
	held, err := s.BudgetHeld(ctx, u1, t0)
	if err != nil {
		t.Fatal(err)
	}
	if held != (budget.Held{Cost: 281, Count: 3}) {
		t.Errorf("held by u1 = %+v, want 281 in 3", held)
	}
	// Expired reservations hold nothing.
	held, err = s.BudgetHeld(ctx, u1, t0.Add(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if held != (budget.Held{Cost: 251, Count: 2}) { // r1 was extended at t0+1s, r5 made at t0+2s
		t.Errorf("held by u1 ten minutes later = %+v, want r1's 250 and r5's 1", held)
	}
	snap = reserve(t, s, reservation("r2", "u1", 5, t0.Add(11*time.Minute)), query(t0.Add(11*time.Minute), u1))
	if !snap.Exists || snap.Own != nil {
		t.Errorf("expired own reservation: exists %v, own %+v; want stored but not live", snap.Exists, snap.Own)
	}
}

var sortBuckets = cmp.Transformer("sort", func(bs []budget.Bucket) map[string]budget.Bucket {
	m := map[string]budget.Bucket{}
	for _, b := range bs {
		m[fmt.Sprint(b.Subject, b.Size, b.Start.UnixMilli())] = b
	}
	return m
})

func entry(id, user string, cost budget.Money, at time.Time) budget.Entry {
	return budget.Entry{
		ID: id, Tenant: "acme", Env: "prod", User: user, Conversation: "c-" + user,
		Usage: budget.Usage{Model: "claude-x", InputTokens: 10, OutputTokens: 20, CacheWrite5mTokens: 3,
			CacheWrite1hTokens: 4, CacheReadTokens: 500, WebSearchRequests: 1, WebFetchRequests: 2},
		Cost: cost, Reserved: cost + 1, RequestBytes: 40, Status: 200, Streamed: true,
		StartedAt: at.Add(-time.Second), SettledAt: at,
	}
}

func testSettle(t *testing.T, s budget.Store) {
	ctx := t.Context()
	u1 := budget.User("u1")
	reserve(t, s, reservation("r1", "u1", 1000, t0), query(t0, u1))
	e := entry("r1", "u1", 777, t0.Add(time.Minute))
	for i, want := range []bool{true, false} {
		applied, err := s.SettleBudget(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if applied != want {
			t.Errorf("settlement %d: applied = %v, want %v", i+1, applied, want)
		}
	}
	// A settlement without a reservation (an unlimited call) counts too.
	if _, err := s.SettleBudget(ctx, entry("r2", "u1", 23, t0.Add(2*time.Minute))); err != nil {
		t.Fatal(err)
	}
	held, err := s.BudgetHeld(ctx, u1, t0)
	if err != nil || held != (budget.Held{}) {
		t.Errorf("held after settling = %+v, %v; want nothing", held, err)
	}
	for _, sub := range []budget.Subject{u1, budget.Tenant("acme"), budget.Env("acme", "prod")} {
		days, err := s.BudgetUsage(ctx, sub, budget.BucketDay, t0.Add(-24*time.Hour), t0.Add(24*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		want := []budget.Bucket{{Subject: sub, Size: budget.BucketDay, Start: budget.BucketDay.Start(t0),
			Cost: 800, Tokens: 2 * 37, Requests: 2}}
		if diff := cmp.Diff(want, days); diff != "" {
			t.Errorf("%s day buckets (-want +got):\n%s", sub, diff)
		}
		fives, err := s.BudgetUsage(ctx, sub, budget.Bucket5m, t0.Add(-time.Hour), t0.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		want = []budget.Bucket{{Subject: sub, Size: budget.Bucket5m, Start: t0.Truncate(5 * time.Minute),
			Cost: 800, Tokens: 74, Requests: 2}}
		if diff := cmp.Diff(want, fives); diff != "" {
			t.Errorf("%s 5m buckets (-want +got):\n%s", sub, diff)
		}
	}
	got, err := s.BudgetLedger(ctx, budget.LedgerQuery{User: "u1"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]budget.Entry{entry("r2", "u1", 23, t0.Add(2*time.Minute)), e}, got); diff != "" {
		t.Errorf("ledger (-want +got):\n%s", diff)
	}
}

// testSettleBatch: entries settled in one batch are each charged once,
// their reservations deleted, and a batch repeated applies nothing.
func testSettleBatch(t *testing.T, s budget.Store) {
	ctx := t.Context()
	u1 := budget.User("u1")
	reserve(t, s, reservation("b1", "u1", 100, t0), query(t0, u1))
	reserve(t, s, reservation("b2", "u1", 100, t0), query(t0, u1))
	es := []budget.Entry{entry("b1", "u1", 10, t0), entry("b2", "u1", 20, t0), entry("b3", "u1", 30, t0)}
	if _, err := s.SettleBudget(ctx, es[2]); err != nil {
		t.Fatal(err)
	}
	applied, err := s.SettleBudgetBatch(ctx, es, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]bool{true, true, false}, applied); diff != "" {
		t.Errorf("applied (-want +got):\n%s", diff)
	}
	if applied, err = s.SettleBudgetBatch(ctx, es, nil); err != nil || applied[0] || applied[1] || applied[2] {
		t.Errorf("batch again: applied %v, %v; want nothing", applied, err)
	}
	if applied, err := s.SettleBudgetBatch(ctx, nil, nil); err != nil || len(applied) != 0 {
		t.Errorf("empty batch: %v, %v", applied, err)
	}
	held, err := s.BudgetHeld(ctx, u1, t0)
	if err != nil || held != (budget.Held{}) {
		t.Errorf("held after the batch = %+v, %v; want nothing", held, err)
	}
	days, err := s.BudgetUsage(ctx, u1, budget.BucketDay, budget.BucketDay.Start(t0), t0.Add(time.Hour))
	if err != nil || len(days) != 1 || days[0].Cost != 60 || days[0].Requests != 3 {
		t.Errorf("day buckets %+v, %v; want 60 in 3 requests", days, err)
	}
}

// testSlice: a slice's reservation is raised by admit, counts no call,
// shrinks by what the settlements of its calls cost, and is deleted when
// resized to nothing.
func testSlice(t *testing.T, s budget.Store) {
	ctx := t.Context()
	u1, acme := budget.User("u1"), budget.Tenant("acme")
	r := reservation("slice-1", "u1", 100, t0)
	r.Slice = true
	err := s.ReserveBudget(ctx, r, query(t0, u1, acme), func(_ *budget.Snapshot, r *budget.Reservation) error {
		r.Cost += 900
		r.Tokens = 50
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	reserve(t, s, reservation("call-1", "u1", 5, t0), query(t0, u1))
	for _, sub := range []budget.Subject{u1, acme} {
		held, err := s.BudgetHeld(ctx, sub, t0)
		if err != nil || held != (budget.Held{Cost: 1005, Tokens: 50, Count: 1}) {
			t.Errorf("%s holds %+v, %v; want the raised slice and one call", sub, held, err)
		}
	}
	snap := reserve(t, s, reservation("call-2", "u1", 1, t0), query(t0, u1))
	if h := snap.Held[u1]; h.Count != 1 || h.Cost != 1005 {
		t.Errorf("snapshot holds %+v, want the slice counting no call", h)
	}
	es := []budget.Entry{entry("from-slice-1", "u1", 300, t0), entry("from-slice-2", "u1", 200, t0)}
	if _, err := s.SettleBudgetBatch(ctx, es, &budget.SliceSize{ID: "slice-1", Cost: 500, Tokens: 10}); err != nil {
		t.Fatal(err)
	}
	held, err := s.BudgetHeld(ctx, u1, t0)
	if err != nil || held != (budget.Held{Cost: 506, Tokens: 10, Count: 2}) {
		t.Errorf("after settling from the slice: %+v, %v; want the slice at 500 beside the calls' 6", held, err)
	}
	if _, err := s.SettleBudgetBatch(ctx, nil, &budget.SliceSize{ID: "slice-1"}); err != nil {
		t.Fatal(err)
	}
	snap = reserve(t, s, r, query(t0, u1))
	if snap.Exists {
		t.Error("a slice resized to nothing is still stored")
	}
	// Resizing a slice that is not there creates nothing.
	if _, err := s.SettleBudgetBatch(ctx, nil, &budget.SliceSize{ID: "slice-gone", Cost: 7}); err != nil {
		t.Fatal(err)
	}
	if held, _ := s.BudgetHeld(ctx, u1, t0); held.Cost != 6+100 {
		t.Errorf("held %+v; want the two calls and the slice made again", held)
	}
}

func testRenew(t *testing.T, s budget.Store) {
	ctx := t.Context()
	u1 := budget.User("u1")
	reserve(t, s, reservation("live", "u1", 10, t0), query(t0, u1))
	reserve(t, s, reservation("dead", "u1", 20, t0.Add(-20*time.Minute)), query(t0.Add(-20*time.Minute), u1))
	if err := s.RenewBudget(ctx, []string{"live", "dead", "missing"}, t0, t0.Add(30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	held, err := s.BudgetHeld(ctx, u1, t0.Add(20*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if held != (budget.Held{Cost: 10, Count: 1}) {
		t.Errorf("held after renewal = %+v, want only the live one, renewed", held)
	}
	if err := s.RenewBudget(ctx, nil, t0, t0); err != nil {
		t.Errorf("renewing nothing: %v", err)
	}
	// A renewal never moves an expiry earlier.
	if err := s.RenewBudget(ctx, []string{"live"}, t0, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if held, err := s.BudgetHeld(ctx, u1, t0.Add(20*time.Minute)); err != nil || held.Count != 1 {
		t.Errorf("held after a renewal to an earlier time = %+v, %v; want the live one still", held, err)
	}
}

func testCollect(t *testing.T, s budget.Store) {
	ctx := t.Context()
	u1 := budget.User("u1")
	old := t0.Add(-7 * time.Hour)
	reserve(t, s, reservation("old", "u1", 10, old), query(old, u1))
	if _, err := s.SettleBudget(ctx, entry("e-old", "u1", 5, old)); err != nil {
		t.Fatal(err)
	}
	reserve(t, s, reservation("new", "u1", 10, t0), query(t0, u1))
	if _, err := s.SettleBudget(ctx, entry("e-new", "u1", 7, t0)); err != nil {
		t.Fatal(err)
	}
	if err := s.CollectBudget(ctx, t0); err != nil {
		t.Fatal(err)
	}
	// The old reservation is gone: reserving its id again is new.
	snap := reserve(t, s, reservation("old", "u1", 1, t0), query(t0, u1))
	if snap.Exists {
		t.Error("a reservation expired for hours survived collection")
	}
	fives, err := s.BudgetUsage(ctx, u1, budget.Bucket5m, t0.Add(-24*time.Hour), t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(fives) != 1 || fives[0].Cost != 7 {
		t.Errorf("5m buckets after collection = %+v, want only the recent one", fives)
	}
	days, err := s.BudgetUsage(ctx, u1, budget.BucketDay, t0.Add(-48*time.Hour), t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var total budget.Money
	for _, b := range days {
		total += b.Cost
	}
	if total != 12 {
		t.Errorf("day buckets hold %v after collection, want all of it (12)", total)
	}
}

func testLedger(t *testing.T, s budget.Store) {
	ctx := t.Context()
	var all []budget.Entry
	for i, u := range []string{"u1", "u2", "u1", "u3"} {
		e := entry(fmt.Sprintf("e%d", i), u, budget.Money(i+1), t0.Add(time.Duration(i)*time.Minute))
		if u == "u3" {
			e.Env = "dev"
		}
		if _, err := s.SettleBudget(ctx, e); err != nil {
			t.Fatal(err)
		}
		all = append([]budget.Entry{e}, all...)
	}
	tests := map[string]struct {
		q    budget.LedgerQuery
		want []budget.Entry
	}{
		"all":          {budget.LedgerQuery{}, all},
		"user":         {budget.LedgerQuery{User: "u1"}, []budget.Entry{all[1], all[3]}},
		"env":          {budget.LedgerQuery{Tenant: "acme", Env: "dev"}, []budget.Entry{all[0]}},
		"conversation": {budget.LedgerQuery{Conversation: "c-u2"}, []budget.Entry{all[2]}},
		"time":         {budget.LedgerQuery{From: t0.Add(time.Minute), To: t0.Add(3 * time.Minute)}, []budget.Entry{all[1], all[2]}},
		"limit":        {budget.LedgerQuery{Limit: 2}, all[:2]},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := s.BudgetLedger(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// testSerialised: many admissions at once, half through each store, each
// admitting only while what is held stays under a cap. If two admissions
// ever decided on the same snapshot, the cap would be passed.
func testSerialised(t *testing.T, a, b budget.Store) {
	const (
		callers = 64
		capN    = 20
	)
	u1 := budget.User("u1")
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted int
	)
	full := errors.New("full")
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			r := reservation(fmt.Sprintf("c%d", i), "u1", 1, t0)
			err := s.ReserveBudget(context.Background(), r, query(t0, u1), func(snap *budget.Snapshot, _ *budget.Reservation) error {
				if snap.Held[u1].Count >= capN {
					return full
				}
				return nil
			})
			switch {
			case err == nil:
				mu.Lock()
				admitted++
				mu.Unlock()
			case err != full:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	held, err := a.BudgetHeld(t.Context(), u1, t0)
	if err != nil {
		t.Fatal(err)
	}
	if admitted != capN || held.Count != capN {
		t.Errorf("admitted %d, %d held; want exactly %d", admitted, held.Count, capN)
	}
}
