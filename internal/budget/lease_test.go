package budget_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/store/sqlite"
	"github.com/talkide/platform/internal/store/storetest"
)

// countingStore counts the admissions and settlement batches that reach
// the store, and can hold settlement batches back.
type countingStore struct {
	budget.Store
	reserves, batches, entries atomic.Int64
	// When gate is not nil, each batch first sends on entered, then waits
	// for a receive from gate.
	entered, gate chan struct{}
}

func (s *countingStore) ReserveBudget(ctx context.Context, r budget.Reservation, q budget.SnapshotQuery, admit func(*budget.Snapshot, *budget.Reservation) error) error {
	s.reserves.Add(1)
	return s.Store.ReserveBudget(ctx, r, q, admit)
}

func (s *countingStore) SettleBudgetBatch(ctx context.Context, es []budget.Entry, lease *budget.SliceSize) ([]bool, error) {
	if len(es) > 0 {
		if s.gate != nil {
			s.entered <- struct{}{}
			<-s.gate
		}
		s.batches.Add(1)
		s.entries.Add(int64(len(es)))
	}
	return s.Store.SettleBudgetBatch(ctx, es, lease)
}

func newSliceEnv(t *testing.T, path string, opts budget.Options) (*budget.Service, *countingStore) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{Store: st}
	svc := budget.New(cs, testPrices, &opts)
	t.Cleanup(func() {
		svc.Close(context.Background())
		st.Close()
	})
	return svc, cs
}

// fixedCost is what a call of 100 input and 100 output tokens of "m" costs.
const fixedCost = budget.Money(100*1000 + 100*2000)

// TestSliceAdmitsInMemory: calls under a spending limit are admitted from
// a slice; the store sees a few admissions (the slice growing), not one
// per call, and the ledger every call at its exact cost.
func TestSliceAdmitsInMemory(t *testing.T) {
	svc, cs := newSliceEnv(t, ":memory:", budget.Options{DefaultOutputTokens: 100})
	setLimit(t, svc, budget.Limit{Subject: budget.User("u1"), Kind: budget.SpendPerDay, Max: int64(budget.Dollar)})
	const n = 40
	for range n {
		h, err := svc.Reserve(t.Context(), call("u1"))
		if err != nil {
			t.Fatal(err)
		}
		if h.Reserved() <= 0 {
			t.Fatalf("reserved %v", h.Reserved())
		}
		h.Settle(settled(100))
	}
	if err := svc.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := cs.reserves.Load(); got > n/4 {
		t.Errorf("%d admissions reached the store for %d calls; want a slice to admit most in memory", got, n)
	}
	st, err := svc.Status(t.Context(), budget.User("u1"))
	if err != nil {
		t.Fatal(err)
	}
	if st[0].Used != int64(n*fixedCost) {
		t.Errorf("used %v, want %v", budget.Money(st[0].Used), n*fixedCost)
	}
	if st[0].Held <= 0 {
		t.Errorf("held %v: want the slice's slack held while it is in use", budget.Money(st[0].Held))
	}
	es, err := svc.Ledger(t.Context(), budget.LedgerQuery{User: "u1"})
	if err != nil || len(es) != n {
		t.Fatalf("ledger: %d entries, %v; want %d", len(es), err, n)
	}
	svc.Release(t.Context())
	if st, _ := svc.Status(t.Context(), budget.User("u1")); st[0].Held != 0 {
		t.Errorf("held %v after Release, want nothing", budget.Money(st[0].Held))
	}
	if n := svc.Reservations(); n != 0 {
		t.Errorf("Reservations() = %d after every call settled", n)
	}
}

// TestSliceNotForEveryLimit: calls under a hard, concurrency or
// requests-per-minute limit each have a reservation of their own.
func TestSliceNotForEveryLimit(t *testing.T) {
	for _, l := range []budget.Limit{
		{Subject: budget.User("u1"), Kind: budget.SpendPerDay, Max: int64(budget.Dollar), Hard: true},
		{Subject: budget.Tenant("acme"), Kind: budget.Concurrent, Max: 100},
		{Subject: budget.Env("acme", "prod"), Kind: budget.RequestsPerMinute, Max: 100},
	} {
		t.Run(string(l.Kind), func(t *testing.T) {
			svc, cs := newSliceEnv(t, ":memory:", budget.Options{})
			if err := svc.SetLimit(t.Context(), l); err != nil {
				t.Fatal(err)
			}
			for range 5 {
				h, err := svc.Reserve(t.Context(), call("u1"))
				if err != nil {
					t.Fatal(err)
				}
				h.Settle(settled(100))
			}
			if got := cs.reserves.Load(); got != 5 {
				t.Errorf("%d admissions in the store for 5 calls, want 5", got)
			}
		})
	}
}

// TestSliceDenial: near the limit the slice admits what fits and refuses
// the rest with the call's own figures: refused while others are in
// flight, then refused for good once they are settled.
func TestSliceDenial(t *testing.T) {
	svc, _ := newSliceEnv(t, ":memory:", budget.Options{DefaultOutputTokens: 100})
	limit := 3*fixedCost + fixedCost/2
	setLimit(t, svc, budget.Limit{Subject: budget.User("u1"), Kind: budget.SpendPerDay, Max: int64(limit)})
	hs := reserveN(t, svc, 3)
	_, err := svc.Reserve(t.Context(), call("u1"))
	d, ok := errors.AsType[*budget.Denial](err)
	if !ok {
		t.Fatalf("fourth call: %v, want a denial", err)
	}
	if !d.InFlight || d.Need != int64(fixedCost) || d.Held != int64(3*fixedCost) || d.Used != 0 {
		t.Errorf("denial %+v: want in flight, needing %v with %v held", d, fixedCost, 3*fixedCost)
	}
	for _, h := range hs {
		h.Settle(settled(100))
	}
	if err := svc.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, err = svc.Reserve(t.Context(), call("u1"))
	d, ok = errors.AsType[*budget.Denial](err)
	if !ok || d.InFlight || d.Used != int64(3*fixedCost) || d.Resets.IsZero() {
		t.Fatalf("after settling: %v (%+v), want the limit spent", err, d)
	}
}

// TestSlicesTwoServices: two services with slices on one database, many
// concurrent calls each: spend never passes the limit and reaches it to
// within one call; every call is in the ledger once; after Release
// nothing is held.
func TestSlicesTwoServices(t *testing.T) {
	path := t.TempDir() + "/cp.db"
	var svcs []*budget.Service
	for range 2 {
		svc, _ := newSliceEnv(t, path, budget.Options{DefaultOutputTokens: 100, InFlightRetry: time.Millisecond})
		svcs = append(svcs, svc)
	}
	limit := 50*fixedCost + fixedCost/2
	if err := svcs[0].SetLimit(t.Context(), budget.Limit{Subject: budget.User("u1"), Kind: budget.SpendPerDay, Max: int64(limit)}); err != nil {
		t.Fatal(err)
	}
	var (
		wg sync.WaitGroup
		ok atomic.Int64
		id atomic.Int64
	)
	deadline := time.Now().Add(time.Minute)
	for i := range 40 {
		svc := svcs[i%2]
		wg.Go(func() {
			for time.Now().Before(deadline) {
				c := budget.Call{ID: fmt.Sprintf("two-%d", id.Add(1)), Tenant: "acme", Env: "prod", User: "u1",
					Conversation: "c1", Model: "m", RequestBytes: 400}
				h, err := svc.Reserve(context.Background(), c)
				if d, denied := errors.AsType[*budget.Denial](err); denied {
					if !d.InFlight {
						return
					}
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				ok.Add(1)
				h.Settle(settled(100))
			}
			t.Error("the calls did not end within a minute")
		})
	}
	wg.Wait()
	for _, svc := range svcs {
		if err := svc.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		svc.Release(t.Context())
	}
	st, err := svcs[0].Status(t.Context(), budget.User("u1"))
	if err != nil {
		t.Fatal(err)
	}
	spent := budget.Money(st[0].Used)
	if spent > limit || spent <= limit-fixedCost {
		t.Errorf("spent %v of %v: want within one call (%v) of the limit, never over", spent, limit, fixedCost)
	}
	if spent != budget.Money(ok.Load())*fixedCost {
		t.Errorf("spent %v for %d calls", spent, ok.Load())
	}
	if st[0].Held != 0 {
		t.Errorf("held %v after every call ended", budget.Money(st[0].Held))
	}
}

// TestSliceTrimmedWhenIdle: a slice unused for LeaseIdle gives back its
// slack without Release.
func TestSliceTrimmedWhenIdle(t *testing.T) {
	svc, _ := newSliceEnv(t, ":memory:", budget.Options{LeaseIdle: 20 * time.Millisecond})
	setLimit(t, svc, budget.Limit{Subject: budget.User("u1"), Kind: budget.SpendPerDay, Max: int64(budget.Dollar)})
	h, err := svc.Reserve(t.Context(), call("u1"))
	if err != nil {
		t.Fatal(err)
	}
	h.Settle(settled(100))
	for {
		st, err := svc.Status(t.Context(), budget.User("u1"))
		if err != nil {
			t.Fatal(err)
		}
		if st[0].Held == 0 && st[0].Used == int64(fixedCost) {
			return
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("still held: %+v", st[0])
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestSliceLimitLowered: a limit changed through this process applies at
// once: the slice reserved under the old limit admits nothing more.
func TestSliceLimitLowered(t *testing.T) {
	svc, _ := newSliceEnv(t, ":memory:", budget.Options{DefaultOutputTokens: 100})
	u1 := budget.User("u1")
	setLimit(t, svc, budget.Limit{Subject: u1, Kind: budget.SpendPerDay, Max: int64(budget.Dollar)})
	h, err := svc.Reserve(t.Context(), call("u1"))
	if err != nil {
		t.Fatal(err)
	}
	h.Settle(settled(100))
	setLimit(t, svc, budget.Limit{Subject: u1, Kind: budget.SpendPerDay, Max: int64(fixedCost)})
	if err := svc.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Reserve(t.Context(), call("u1")); err == nil {
		t.Fatal("admitted from the old slice after the limit was lowered to one call, already spent")
	}
}

// TestSliceSettlementsBatched: settlements that come while a batch is
// being written go into the next batch together.
func TestSliceSettlementsBatched(t *testing.T) {
	st := storetest.Open(t, sqlite.Open, ":memory:")
	cs := &countingStore{Store: st, entered: make(chan struct{}), gate: make(chan struct{})}
	svc := budget.New(cs, testPrices, &budget.Options{DefaultOutputTokens: 100})
	defer svc.Close(context.Background())
	setLimit(t, svc, budget.Limit{Subject: budget.User("u1"), Kind: budget.SpendPerDay, Max: int64(budget.Dollar)})
	hs := reserveN(t, svc, 10)
	hs[0].Settle(settled(100))
	<-cs.entered // the first batch, one settlement, is being written
	for _, h := range hs[1:] {
		h.Settle(settled(100))
	}
	cs.gate <- struct{}{}
	<-cs.entered // the rest, in one batch
	cs.gate <- struct{}{}
	if err := svc.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if b, e := cs.batches.Load(), cs.entries.Load(); b != 2 || e != 10 {
		t.Errorf("%d settlements in %d batches, want 10 in 2", e, b)
	}
}

// failingStore fails settlement batches that hold failID, and slice
// resizes without entries (trims) after writing them when trimCommits.
type failingStore struct {
	budget.Store
	failID      string
	trimCommits atomic.Bool
}

func (s *failingStore) SettleBudgetBatch(ctx context.Context, es []budget.Entry, lease *budget.SliceSize) ([]bool, error) {
	for _, e := range es {
		if e.ID == s.failID {
			return nil, errors.New("invalid byte sequence")
		}
	}
	applied, err := s.Store.SettleBudgetBatch(ctx, es, lease)
	if len(es) == 0 && s.trimCommits.Load() {
		return nil, errors.New("connection reset after commit")
	}
	return applied, err
}

// setLimit sets l on svc.
func setLimit(t *testing.T, svc *budget.Service, l budget.Limit) {
	t.Helper()
	if err := svc.SetLimit(t.Context(), l); err != nil {
		t.Fatal(err)
	}
}

// reserveN reserves n calls of user u1 on svc.
func reserveN(t *testing.T, svc *budget.Service, n int) []*budget.Hold {
	t.Helper()
	var hs []*budget.Hold
	for range n {
		h, err := svc.Reserve(t.Context(), call("u1"))
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	return hs
}

// held is what the store holds for u1 now.
func held(t *testing.T, svc *budget.Service) budget.Money {
	t.Helper()
	st, err := svc.Status(t.Context(), budget.User("u1"))
	if err != nil {
		t.Fatal(err)
	}
	return budget.Money(st[0].Held)
}

// TestSliceOverrunKeepsCover: a call that costs more than its estimate
// does not take the cover of the slice's other calls in flight: the store
// still holds at least their estimates.
func TestSliceOverrunKeepsCover(t *testing.T) {
	svc, _ := newSliceEnv(t, ":memory:", budget.Options{DefaultOutputTokens: 100, LeaseCalls: 1})
	setLimit(t, svc, budget.Limit{Subject: budget.User("u1"), Kind: budget.SpendPerDay, Max: int64(budget.Dollar)})
	a, err := svc.Reserve(t.Context(), call("u1"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := svc.Reserve(t.Context(), call("u1"))
	if err != nil {
		t.Fatal(err)
	}
	svc.WaitGrowths()       // the slice's size is settled before a's cost comes
	a.Settle(settled(2000)) // twenty times its output estimate
	if err := svc.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := held(t, svc); got < b.Reserved() {
		t.Errorf("the store holds %v while a call of %v is in flight", got, b.Reserved())
	}
}

// TestSliceTrimCommittedDespiteError: a trim whose write was committed
// but reported failed leaves the process admitting nothing the store does
// not hold.
func TestSliceTrimCommittedDespiteError(t *testing.T) {
	st := storetest.Open(t, sqlite.Open, ":memory:")
	fs := &failingStore{Store: st}
	svc := budget.New(fs, testPrices, &budget.Options{DefaultOutputTokens: 100})
	defer svc.Close(context.Background())
	setLimit(t, svc, budget.Limit{Subject: budget.User("u1"), Kind: budget.SpendPerDay, Max: int64(budget.Dollar)})
	h, err := svc.Reserve(t.Context(), call("u1"))
	if err != nil {
		t.Fatal(err)
	}
	svc.WaitGrowths()
	inFlight := h.Reserved() // in flight while the slice is trimmed to it
	fs.trimCommits.Store(true)
	svc.Release(t.Context())
	fs.trimCommits.Store(false)
	for range 3 {
		h, err := svc.Reserve(t.Context(), call("u1"))
		if err != nil {
			t.Fatal(err)
		}
		inFlight += h.Reserved()
	}
	if got := held(t, svc); got < inFlight {
		t.Errorf("the store holds %v for %v in flight", got, inFlight)
	}
}

// TestSliceBadSettlement: one settlement the store refuses does not hold
// up the others of its batch.
func TestSliceBadSettlement(t *testing.T) {
	st := storetest.Open(t, sqlite.Open, ":memory:")
	cs := &countingStore{Store: st, entered: make(chan struct{}), gate: make(chan struct{})}
	fs := &failingStore{Store: cs}
	svc := budget.New(fs, testPrices, &budget.Options{DefaultOutputTokens: 100})
	setLimit(t, svc, budget.Limit{Subject: budget.User("u1"), Kind: budget.SpendPerDay, Max: int64(budget.Dollar)})
	var hs []*budget.Hold
	for i := range 6 {
		c := call("u1")
		if i == 3 {
			c.ID = "bad"
			fs.failID = c.ID
		}
		h, err := svc.Reserve(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	hs[0].Settle(settled(100))
	<-cs.entered // the first batch is being written
	for _, h := range hs[1:] {
		h.Settle(settled(100))
	}
	go func() { // let every later batch through
		for range cs.entered {
			cs.gate <- struct{}{}
		}
	}()
	cs.gate <- struct{}{}
	for {
		es, err := svc.Ledger(t.Context(), budget.LedgerQuery{User: "u1"})
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 5 {
			break
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%d entries in the ledger, want the 5 good ones", len(es))
		case <-time.After(5 * time.Millisecond):
		}
	}
	// The bad one is retried until Close gives up on it.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := svc.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want the bad settlement unwritten", err)
	}
	close(cs.entered)
}

// TestSliceRetiredByConcurrencyLimit: a concurrency limit added over a
// spending limit makes calls take reservations of their own, and the
// slice reserved before admits nothing and holds nothing that blocks them.
func TestSliceRetiredByConcurrencyLimit(t *testing.T) {
	svc, _ := newSliceEnv(t, ":memory:", budget.Options{DefaultOutputTokens: 100})
	setLimit(t, svc, budget.Limit{Subject: budget.User("u1"), Kind: budget.SpendPerDay, Max: int64(4 * fixedCost)})
	h, err := svc.Reserve(t.Context(), call("u1"))
	if err != nil {
		t.Fatal(err)
	}
	h.Settle(settled(100))
	if err := svc.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	setLimit(t, svc, budget.Limit{Subject: budget.Tenant("acme"), Kind: budget.Concurrent, Max: 10})
	svc.Release(t.Context()) // what the trimmer does within a quarter of a second
	for i := range 3 {
		if _, err := svc.Reserve(t.Context(), call("u1")); err != nil {
			t.Fatalf("call %d of the 3 that fit: %v", i+1, err)
		}
	}
}
