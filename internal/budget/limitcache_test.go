package budget_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/talkide/platform/internal/budget"
)

// gatedStore reads limits, then holds what it read until release is
// closed (a read that has seen the database but not yet returned), and
// counts the reads.
type gatedStore struct {
	budget.Store
	reads   atomic.Int64
	entered chan struct{} // receives when a read begins, while it has room
	release chan struct{}
	fail    atomic.Bool // reads fail
}

// gate puts a gatedStore in front of e's store.
func gate(e *env) *gatedStore {
	return &gatedStore{Store: e.store, entered: make(chan struct{}, 1), release: make(chan struct{})}
}

// serveGated is a service over gs on e's clock, with o's other options,
// closed when the test ends.
func serveGated(t *testing.T, e *env, gs *gatedStore, o budget.Options) *budget.Service {
	o.Now = e.clock.Now
	svc := budget.New(gs, testPrices, &o)
	t.Cleanup(func() { svc.Close(context.Background()) })
	return svc
}

func (s *gatedStore) BudgetLimits(ctx context.Context, subjects ...budget.Subject) ([]budget.Limit, error) {
	s.reads.Add(1)
	ls, err := s.Store.BudgetLimits(ctx, subjects...)
	if s.fail.Load() {
		err = errors.New("database is locked")
	}
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.release
	return ls, err
}

// TestLimitReadShared: calls that find the limits of their user uncached
// at the same time share one read of the store.
func TestLimitReadShared(t *testing.T) {
	e := newEnv(t, budget.Options{})
	e.limit(t, budget.Limit{Subject: budget.User("u1"), Kind: budget.Concurrent, Max: 1000})
	gs := gate(e)
	svc := serveGated(t, e, gs, budget.Options{})

	const calls = 50
	var (
		wg      sync.WaitGroup
		started sync.WaitGroup
	)
	holds := make([]*budget.Hold, calls)
	errs := make([]error, calls)
	cs := make([]budget.Call, calls)
	for i := range cs {
		cs[i] = call("u1")
	}
	started.Add(calls)
	for i := range calls {
		wg.Go(func() {
			started.Done()
			holds[i], errs[i] = svc.Reserve(t.Context(), cs[i])
		})
	}
	<-gs.entered
	started.Wait()
	close(gs.release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if holds[i].Reserved() == 0 {
			t.Errorf("call %d holds nothing: its limit was not applied", i)
		}
	}
	if n := gs.reads.Load(); n != 1 {
		t.Errorf("%d reads of the limits for %d concurrent calls, want 1", n, calls)
	}
}

// TestLimitReadCallerGone: the call that started a shared read may go
// away; the others still get the limits.
func TestLimitReadCallerGone(t *testing.T) {
	e := newEnv(t, budget.Options{})
	e.limit(t, budget.Limit{Subject: budget.User("u1"), Kind: budget.Concurrent, Max: 1000})
	gs := gate(e)
	svc := serveGated(t, e, gs, budget.Options{})

	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan error, 1)
	c1, c2 := call("u1"), call("u1")
	go func() {
		_, err := svc.Reserve(ctx, c1)
		first <- err
	}()
	<-gs.entered
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled call: %v, want context.Canceled", err)
	}
	second := make(chan error, 1)
	go func() {
		h, err := svc.Reserve(t.Context(), c2)
		if err == nil && h.Reserved() == 0 {
			err = errors.New("its limit was not applied")
		}
		second <- err
	}()
	close(gs.release)
	if err := <-second; err != nil {
		t.Errorf("the call that shared the read: %v", err)
	}
	if n := gs.reads.Load(); n != 1 {
		t.Errorf("%d reads, want 1", n)
	}
}

// TestLimitReadFailure: a failed read fails the calls that shared it, is
// not cached, and the next call reads again.
func TestLimitReadFailure(t *testing.T) {
	e := newEnv(t, budget.Options{})
	gs := gate(e)
	close(gs.release)
	gs.fail.Store(true)
	svc := serveGated(t, e, gs, budget.Options{})
	if _, err := svc.Reserve(t.Context(), call("u1")); err == nil {
		t.Fatal("Reserve succeeded without its limits")
	}
	gs.fail.Store(false)
	if _, err := svc.Reserve(t.Context(), call("u1")); err != nil {
		t.Fatal(err)
	}
	if n := gs.reads.Load(); n != 2 {
		t.Errorf("%d reads, want 2", n)
	}
}

// TestLimitReadStale: a limit set while a read is under way is not hidden
// by that read: the next call sees it at once.
func TestLimitReadStale(t *testing.T) {
	e := newEnv(t, budget.Options{})
	gs := gate(e)
	svc := serveGated(t, e, gs, budget.Options{LimitCacheTTL: time.Hour})
	first := make(chan error, 1)
	c1, c2 := call("u1"), call("u1")
	go func() {
		_, err := svc.Reserve(t.Context(), c1) // reads: no limits yet
		first <- err
	}()
	<-gs.entered
	// The read above saw no limit and has not returned.
	setLimit(t, svc, budget.Limit{Subject: budget.User("u1"), Kind: budget.Concurrent, Max: 0})
	close(gs.release)
	if err := <-first; err != nil {
		t.Fatalf("the call that read before the limit: %v", err)
	}
	if _, err := svc.Reserve(t.Context(), c2); err == nil {
		t.Error("a call after SetLimit was admitted under the limits read before it")
	}
}

// TestLimitReadAhead: limits past half their time in the cache are read
// again in the background; the call that notices does not wait for it,
// and the calls after it get what the read found.
func TestLimitReadAhead(t *testing.T) {
	e := newEnv(t, budget.Options{})
	u1 := budget.User("u1")
	e.limit(t, budget.Limit{Subject: u1, Kind: budget.Concurrent, Max: 1000})
	gs := gate(e)
	svc := serveGated(t, e, gs, budget.Options{LimitCacheTTL: time.Minute, LeaseCalls: -1})

	first := make(chan error)
	go func() { _, err := svc.Reserve(t.Context(), call("u1")); first <- err }()
	<-gs.entered
	gs.release <- struct{}{} // the first read, which the call waits for
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// Lowered through another process: this one learns it from the store.
	if err := e.store.PutBudgetLimit(t.Context(), budget.Limit{Subject: u1, Kind: budget.Concurrent, Max: 1}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(40 * time.Second)
	if _, err := svc.Reserve(t.Context(), call("u1")); err != nil {
		t.Fatalf("the call that starts the read ahead: %v", err) // admitted under the cached limit, without waiting
	}
	<-gs.entered
	close(gs.release)
	// The read ahead fills the cache; soon a call is refused by the new limit.
	for {
		_, err := svc.Reserve(t.Context(), call("u1"))
		if d, ok := errors.AsType[*budget.Denial](err); ok && d.Limit.Max == 1 {
			break
		}
		select {
		case <-t.Context().Done():
			t.Fatal("the limit read ahead never applied")
		case <-time.After(time.Millisecond):
		}
	}
	if n := gs.reads.Load(); n != 2 {
		t.Errorf("%d reads of the limits, want 2 (the first, the one ahead)", n)
	}
}
