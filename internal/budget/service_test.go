package budget_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/fakeclock"
	"github.com/talkide/platform/internal/store/sqlite"
)

// Test prices: "m" costs 1,000 nanodollars per input token and 2,000 per
// output token.
var testPrices = func() *budget.Prices {
	p, err := budget.DefaultPrices().Override([]byte(`{"models":{"m":{"input":"1","output":"2","cache_write_5m":"1.25","cache_write_1h":"2","cache_read":"0.1"}}}`))
	if err != nil {
		panic(err)
	}
	return p
}()

type env struct {
	svc   *budget.Service
	store *sqlite.Store
	clock *fakeclock.Clock
}

func newEnv(t *testing.T, opts budget.Options) *env {
	t.Helper()
	st, err := sqlite.Open(t.Context(), ":memory:", nil)
	if err != nil {
		t.Fatal(err)
	}
	c := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	opts.Now = c.Now
	if opts.LeaseCalls == 0 {
		// These tests are about the reservations of single calls;
		// lease_test.go is about slices.
		opts.LeaseCalls = -1
	}
	svc := budget.New(st, testPrices, &opts)
	t.Cleanup(func() {
		svc.Close(context.Background())
		st.Close()
	})
	return &env{svc: svc, store: st, clock: c}
}

var callN int // the tests of this file run one at a time

func call(user string) budget.Call {
	callN++
	return budget.Call{ID: fmt.Sprintf("call-%d", callN),
		Tenant: "acme", Env: "prod", User: user, Conversation: "c1", Model: "m", RequestBytes: 400}
}

func (e *env) limit(t *testing.T, l budget.Limit) {
	t.Helper()
	if err := e.svc.SetLimit(t.Context(), l); err != nil {
		t.Fatal(err)
	}
}

func (e *env) reserve(t *testing.T, c budget.Call) *budget.Hold {
	t.Helper()
	h, err := e.svc.Reserve(t.Context(), c)
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	return h
}

func (e *env) denied(t *testing.T, c budget.Call) *budget.Denial {
	t.Helper()
	h, err := e.svc.Reserve(t.Context(), c)
	d, ok := errors.AsType[*budget.Denial](err)
	if !ok {
		t.Fatalf("reserve: %v, %v; want a denial", h, err)
	}
	return d
}

func (e *env) flush(t *testing.T) {
	t.Helper()
	if err := e.svc.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// settled is the usage of a call of 100 input and out output tokens.
func settled(out int64) budget.Settlement {
	return budget.Settlement{Usage: budget.Usage{Model: "m", InputTokens: 100, OutputTokens: out}, Status: 200, Streamed: true}
}

// TestReservationSize: the reservation is the input estimate (bytes / 4)
// plus the user's recent output, not max_tokens.
func TestReservationSize(t *testing.T) {
	e := newEnv(t, budget.Options{DefaultOutputTokens: 500})
	e.limit(t, budget.Limit{Subject: budget.User("u1"), Kind: budget.SpendPerDay, Max: int64(budget.Dollar)})

	c := call("u1")
	c.MaxTokens = 64000
	h := e.reserve(t, c)
	if want := budget.Money(100*1000 + 500*2000); h.Reserved() != want {
		t.Errorf("first reservation %v, want %v (no history: the default output)", h.Reserved(), want)
	}
	h.Settle(settled(40))
	c = call("u1")
	c.MaxTokens = 20
	if h := e.reserve(t, c); h.Reserved() != 100*1000+20*2000 {
		t.Errorf("reservation %v, want the output capped by max_tokens", h.Reserved())
	}
	c = call("u1")
	c.MaxTokens = 64000
	if h := e.reserve(t, c); h.Reserved() != 100*1000+40*2000 {
		t.Errorf("reservation %v, want the output of the history (40), not max_tokens", h.Reserved())
	}
	// Cached input costs a tenth: the user's input factor learns it.
	for range 8 {
		h = e.reserve(t, call("u1"))
		h.Settle(budget.Settlement{Usage: budget.Usage{Model: "m", CacheReadTokens: 100, OutputTokens: 40}, Status: 200})
	}
	if h := e.reserve(t, call("u1")); h.Reserved() >= 100*1000+40*2000 {
		t.Errorf("reservation %v after a cached call, want less input cost than uncached", h.Reserved())
	}
}

// TestStaleReservation: a gateway that crashed never settles; its
// reservation expires and the limit can be reached again.
func TestStaleReservation(t *testing.T) {
	e := newEnv(t, budget.Options{DefaultOutputTokens: 100, ReservationTTL: time.Minute})
	cost := int64(100*1000 + 100*2000)
	e.limit(t, budget.Limit{Subject: budget.User("u1"), Kind: budget.SpendPerDay, Max: 2 * cost})
	e.reserve(t, call("u1")) // never settled: its process died
	h := e.reserve(t, call("u1"))
	if d := e.denied(t, call("u1")); !d.InFlight {
		t.Errorf("denial %v, want one caused by calls in flight", d)
	}
	h.Settle(settled(100))
	e.flush(t)
	if d := e.denied(t, call("u1")); !d.InFlight {
		t.Errorf("denial %v, want one caused by the stale reservation", d)
	}
	e.clock.Advance(time.Minute + time.Second)
	e.reserve(t, call("u1")).Settle(settled(100))
	e.flush(t)
	if d := e.denied(t, call("u1")); d.InFlight || d.Used != 2*cost {
		t.Errorf("denial %+v, want the limit spent", d)
	}
}

// TestRenewal: the reservations of calls in flight are renewed, so that a
// long call keeps holding its money.
func TestRenewal(t *testing.T) {
	e := newEnv(t, budget.Options{ReservationTTL: 30 * time.Millisecond})
	e.limit(t, budget.Limit{Subject: budget.User("u1"), Kind: budget.Concurrent, Max: 5})
	e.reserve(t, call("u1"))
	start := e.clock.Now()
	// Let the fake clock run past several lifetimes; the renewer, on a
	// real ticker, keeps moving the expiry past it.
	deadline := time.Now().Add(10 * time.Second)
	for step := 0; ; step++ {
		e.clock.Advance(10 * time.Millisecond)
		held, err := e.store.BudgetHeld(t.Context(), budget.User("u1"), e.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		if held.Count != 1 {
			// Not yet renewed for this step: wait for the renewer.
			e.clock.Advance(-10 * time.Millisecond)
			if time.Now().After(deadline) {
				t.Fatal("the reservation was not renewed")
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if e.clock.Now().Sub(start) > 200*time.Millisecond {
			return
		}
	}
}

func TestSettleOnce(t *testing.T) {
	e := newEnv(t, budget.Options{})
	e.limit(t, budget.Limit{Subject: budget.User("u1"), Kind: budget.SpendPerDay, Max: int64(budget.Dollar)})
	h := e.reserve(t, call("u1"))
	h.Settle(settled(10))
	h.Settle(settled(1000))
	e.flush(t)
	es, err := e.svc.Ledger(t.Context(), budget.LedgerQuery{User: "u1"})
	if err != nil || len(es) != 1 || es[0].Cost != 100*1000+10*2000 || es[0].Reserved == 0 {
		t.Fatalf("ledger %+v, %v; want one entry of the first settlement", es, err)
	}
	st, err := e.svc.Status(t.Context(), budget.User("u1"))
	if err != nil || st[0].Used != int64(es[0].Cost) || st[0].Held != 0 {
		t.Errorf("status %+v, %v", st, err)
	}
}

// TestFlushBesideSettlements: Flush may wait while calls settle beside it
// (a gateway between a benchmark's phases, Close under load): under -race
// this once reported a settlement's count rising from zero while a Flush
// waited on it. Every settlement is in the ledger after the last Flush.
func TestFlushBesideSettlements(t *testing.T) {
	e := newEnv(t, budget.Options{})
	const workers, calls = 4, 200
	var g errgroup.Group
	for w := range workers {
		g.Go(func() error {
			for i := range calls {
				c := budget.Call{ID: fmt.Sprintf("w%d-%d", w, i), Tenant: "acme", Env: "prod", User: "u1", Conversation: "c1", Model: "m", RequestBytes: 400}
				h, err := e.svc.Reserve(t.Context(), c)
				if err != nil {
					return err
				}
				h.Settle(settled(5))
			}
			return nil
		})
	}
	flushes := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				flushes <- nil
				return
			default:
			}
			if err := e.svc.Flush(t.Context()); err != nil {
				flushes <- err
				return
			}
		}
	}()
	err := g.Wait()
	close(stop)
	if ferr := <-flushes; err == nil {
		err = ferr
	}
	if err != nil {
		t.Fatal(err)
	}
	e.flush(t)
	es, err := e.svc.Ledger(t.Context(), budget.LedgerQuery{User: "u1"})
	if err != nil || len(es) != workers*calls {
		t.Fatalf("ledger: %d entries, %v; want %d", len(es), err, workers*calls)
	}
}

// TestScopes: tenant and env caps hold every user of theirs.
func TestScopes(t *testing.T) {
	e := newEnv(t, budget.Options{DefaultOutputTokens: 100})
	cost := int64(100*1000 + 100*2000)
	e.limit(t, budget.Limit{Subject: budget.Env("acme", "prod"), Kind: budget.SpendPerMonth, Max: cost})
	e.reserve(t, call("u1")).Settle(settled(100))
	e.flush(t)
	d := e.denied(t, call("u2"))
	if d.Limit.Subject != budget.Env("acme", "prod") {
		t.Errorf("denied by %v, want the env cap", d.Limit.Subject)
	}
	e.limit(t, budget.Limit{Subject: budget.Tenant("acme"), Kind: budget.Concurrent, Max: 1})
	other := call("u2")
	other.Env = "dev"
	e.reserve(t, other) // another env of the tenant
	other = call("u3")
	other.Env = "dev"
	if d := e.denied(t, other); d.Limit.Kind != budget.Concurrent || !d.InFlight {
		t.Errorf("denial %v, want the tenant's concurrency", d)
	}
}

func TestFairUse(t *testing.T) {
	e := newEnv(t, budget.Options{DefaultOutputTokens: 100})
	e.limit(t, budget.Limit{Subject: budget.User("u1"), Kind: budget.RequestsPerMinute, Max: 2})
	e.reserve(t, call("u1")).Settle(settled(100))
	e.reserve(t, call("u1")).Settle(settled(100))
	d := e.denied(t, call("u1"))
	if d.Limit.Kind != budget.RequestsPerMinute || d.RetryAfter != time.Minute {
		t.Errorf("denial %v after %v, want the minute's requests", d, d.RetryAfter)
	}
	e.clock.Advance(time.Minute)
	e.reserve(t, call("u1")).Settle(settled(100))
	e.flush(t)

	e.limit(t, budget.Limit{Subject: budget.User("u1"), Kind: budget.TokensPerDay, Max: 700})
	// 3 calls of 200 tokens are settled: 600; the next needs 200.
	if d := e.denied(t, call("u1")); d.Limit.Kind != budget.TokensPerDay || d.Used != 600 {
		t.Errorf("denial %+v, want tokens per day at 600", d)
	}
}

// TestHardCheck: under a hard limit the reservation follows a stream and
// refuses to grow past the limit.
func TestHardCheck(t *testing.T) {
	e := newEnv(t, budget.Options{DefaultOutputTokens: 10, HardStopMargin: 10})
	limit := budget.Money(100*1000 + 200*2000)
	e.limit(t, budget.Limit{Subject: budget.User("u1"), Kind: budget.SpendPerDay, Max: int64(limit), Hard: true})
	h := e.reserve(t, call("u1"))
	if !h.Hard() {
		t.Fatal("the hold does not know of the hard limit")
	}
	ctx := t.Context()
	extended := 0
	for out := int64(0); out <= 190; out += 10 {
		u := budget.Usage{Model: "m", InputTokens: 100, OutputTokens: out}
		covered, before := h.Covers(u), h.Reserved()
		if err := h.Check(ctx, u); err != nil {
			t.Fatalf("at %d output tokens: %v", out, err)
		}
		if h.Reserved() > limit {
			t.Fatalf("reserved %v, over the limit", h.Reserved())
		}
		// Covers says exactly when Check leaves the reservation alone.
		if grew := h.Reserved() != before; grew == covered {
			t.Fatalf("at %d output tokens: Covers %v, but the reservation went from %v to %v", out, covered, before, h.Reserved())
		}
		if !covered {
			extended++
		}
		if !h.Covers(u) {
			t.Fatalf("at %d output tokens: not covered after Check", out)
		}
	}
	if extended == 0 {
		t.Fatal("the reservation never had to grow: the test checks nothing")
	}
	past := budget.Usage{Model: "m", InputTokens: 100, OutputTokens: 191}
	if h.Covers(past) {
		t.Fatal("the reservation covers a usage past the limit")
	}
	err := h.Check(ctx, past)
	if d, ok := errors.AsType[*budget.Denial](err); !ok || !d.MidStream {
		t.Fatalf("past the limit: %v, want a mid-stream denial", err)
	}
	// A soft limit does not stop streams.
	e.limit(t, budget.Limit{Subject: budget.User("u2"), Kind: budget.SpendPerDay, Max: int64(limit)})
	h = e.reserve(t, call("u2"))
	if h.Hard() || !h.Covers(budget.Usage{Model: "m", OutputTokens: 1e6}) || h.Check(ctx, budget.Usage{Model: "m", OutputTokens: 1e6}) != nil {
		t.Error("a soft limit checks streams")
	}
}

// TestUnlimited: without limits nothing is reserved, but the call is
// charged.
func TestUnlimited(t *testing.T) {
	e := newEnv(t, budget.Options{})
	h := e.reserve(t, call("u1"))
	held, err := e.store.BudgetHeld(t.Context(), budget.User("u1"), e.clock.Now())
	if err != nil || held != (budget.Held{}) || h.Reserved() != 0 {
		t.Errorf("held %+v, %v; reserved %v; want nothing", held, err, h.Reserved())
	}
	h.Settle(settled(5))
	e.flush(t)
	if es, err := e.svc.Ledger(t.Context(), budget.LedgerQuery{}); err != nil || len(es) != 1 || es[0].Cost != 110_000 {
		t.Errorf("ledger %+v, %v", es, err)
	}
}

// TestLimitCache: a limit set through another process applies here within
// the cache's lifetime; one set here, at once.
func TestLimitCache(t *testing.T) {
	e := newEnv(t, budget.Options{LimitCacheTTL: time.Minute})
	other := budget.New(e.store, testPrices, &budget.Options{Now: e.clock.Now})
	t.Cleanup(func() { other.Close(context.Background()) })
	e.reserve(t, call("u1")) // caches "no limits"
	if err := other.SetLimit(t.Context(), budget.Limit{Subject: budget.User("u1"), Kind: budget.Concurrent, Max: 0}); err != nil {
		t.Fatal(err)
	}
	e.reserve(t, call("u1"))
	e.clock.Advance(time.Minute)
	e.denied(t, call("u1"))
	e.limit(t, budget.Limit{Subject: budget.User("u1"), Kind: budget.Concurrent, Max: 10})
	e.reserve(t, call("u1"))
	if err := e.svc.DeleteLimit(t.Context(), budget.User("u1"), budget.Concurrent); err != nil {
		t.Fatal(err)
	}
	if ls, err := e.svc.Limits(t.Context()); err != nil || len(ls) != 0 {
		t.Errorf("limits %v, %v; want none", ls, err)
	}
}

func TestSetLimitInvalid(t *testing.T) {
	e := newEnv(t, budget.Options{})
	for name, l := range map[string]budget.Limit{
		"no subject":    {Kind: budget.SpendPerDay, Max: 1},
		"bad env":       {Subject: budget.Subject{Scope: budget.ScopeEnv, ID: "acme"}, Kind: budget.SpendPerDay, Max: 1},
		"bad kind":      {Subject: budget.User("u"), Kind: "spend_per_year", Max: 1},
		"negative":      {Subject: budget.User("u"), Kind: budget.SpendPerDay, Max: -1},
		"hard requests": {Subject: budget.User("u"), Kind: budget.RequestsPerMinute, Max: 1, Hard: true},
	} {
		if err := e.svc.SetLimit(t.Context(), l); !errors.Is(err, budget.ErrInvalidLimit) {
			t.Errorf("%s: %v, want ErrInvalidLimit", name, err)
		}
	}
}

// TestAdmitCountsFreeRequests: a free call (count_tokens) is admitted and
// counted by requests-per-minute limits, and by nothing else: thirty in a
// row pass a limit of one request a minute once; a spending, token or
// concurrency limit that has no room does not stop one.
func TestAdmitCountsFreeRequests(t *testing.T) {
	e := newEnv(t, budget.Options{})
	e.limit(t, budget.Limit{Subject: budget.User("u1"), Kind: budget.RequestsPerMinute, Max: 1})
	passed := 0
	for range 30 {
		err := e.svc.Admit(t.Context(), call("u1"))
		if err == nil {
			passed++
			continue
		}
		d, ok := errors.AsType[*budget.Denial](err)
		if !ok || d.Limit.Kind != budget.RequestsPerMinute || d.Used != 1 {
			t.Fatalf("Admit: %v; want a requests-per-minute denial with 1 used", err)
		}
	}
	if passed != 1 {
		t.Errorf("%d of 30 free calls passed a limit of 1 a minute, want 1", passed)
	}
	// They count against the calls that cost, too, and the other way round.
	if d := e.denied(t, call("u1")); d.Limit.Kind != budget.RequestsPerMinute {
		t.Errorf("a paid call after a free one: denied by %s", d.Limit.Kind)
	}
	e.clock.Advance(time.Minute)
	h := e.reserve(t, call("u1"))
	if err := e.svc.Admit(t.Context(), call("u1")); err == nil {
		t.Error("a free call after a paid one in the same minute passed a limit of 1")
	}
	h.Settle(settled(10))
	e.flush(t)
	if n := e.svc.Reservations(); n != 0 {
		t.Errorf("%d reservations in flight after the only paid call settled; free calls hold none", n)
	}

	// Limits of other kinds do not apply to a free call.
	for _, l := range []budget.Limit{
		{Subject: budget.User("u2"), Kind: budget.SpendPerDay, Max: 0},
		{Subject: budget.User("u2"), Kind: budget.TokensPerDay, Max: 0},
		{Subject: budget.User("u2"), Kind: budget.Concurrent, Max: 0},
	} {
		e.limit(t, l)
	}
	for range 5 {
		if err := e.svc.Admit(t.Context(), call("u2")); err != nil {
			t.Fatalf("a free call under spending, token and concurrency limits: %v", err)
		}
	}
	// A user without any limit: admitted, and nothing is written.
	if err := e.svc.Admit(t.Context(), call("u3")); err != nil {
		t.Fatal(err)
	}
	if bs, err := e.store.BudgetUsage(t.Context(), budget.User("u3"), budget.BucketMinute, time.Time{}, e.clock.Now().Add(time.Hour)); err != nil || len(bs) != 0 {
		t.Errorf("minute buckets of a user without limits: %v, %v; want none", bs, err)
	}
}
