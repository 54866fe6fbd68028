package budget_test

import (
	"testing"
	"time"

	"github.com/talkide/platform/internal/budget"
)

// TestRefused: a denial with nothing left under its limit is remembered
// for the user's calls until the window frees room, the limit changes or
// the limits would be read again; one that depends on the call or on the
// calls in flight is not.
func TestRefused(t *testing.T) {
	who := func(user string) budget.Call { return budget.Call{Tenant: "acme", Env: "prod", User: user} }

	t.Run("spent", func(t *testing.T) {
		e := newEnv(t, budget.Options{DefaultOutputTokens: 100})
		e.limit(t, budget.Limit{Subject: budget.User("u1"), Kind: budget.SpendPerDay, Max: 400_000})
		if d := e.svc.Refused(who("u1"), false); d != nil {
			t.Fatalf("refused before any denial: %v", d)
		}
		e.reserve(t, call("u1")).Settle(settled(1000)) // $0.0021 of the $0.0004
		e.flush(t)
		d := e.denied(t, call("u1"))
		got := e.svc.Refused(who("u1"), false)
		if got == nil || got.Limit.Kind != budget.SpendPerDay || got.Used != d.Used {
			t.Fatalf("Refused = %v, want the denial %v", got, d)
		}
		if got.RetryAfter <= 0 {
			t.Errorf("RetryAfter %v", got.RetryAfter)
		}
		if d := e.svc.Refused(who("u1"), true); d != nil {
			t.Errorf("a free call refused by a spending limit: %v", d)
		}
		if d := e.svc.Refused(who("u2"), false); d != nil {
			t.Errorf("another user refused: %v", d)
		}
		// Half the limit cache's time later the limits are read again:
		// forgotten. Once they have been read again (here: the cache has
		// expired, so the next call reads them), the next denial is
		// remembered anew.
		e.clock.Advance(budget.DefaultLimitCacheTTL/2 + time.Millisecond)
		if d := e.svc.Refused(who("u1"), false); d != nil {
			t.Errorf("remembered past the limits' read-ahead: %v", d)
		}
		e.clock.Advance(budget.DefaultLimitCacheTTL)
		e.denied(t, call("u1"))
		if e.svc.Refused(who("u1"), false) == nil {
			t.Fatal("not remembered again")
		}
		// A raised limit forgets it at once.
		e.limit(t, budget.Limit{Subject: budget.User("u1"), Kind: budget.SpendPerDay, Max: int64(budget.Dollar)})
		if d := e.svc.Refused(who("u1"), false); d != nil {
			t.Errorf("remembered after the limit changed: %v", d)
		}
	})

	t.Run("concurrency", func(t *testing.T) {
		e := newEnv(t, budget.Options{})
		e.limit(t, budget.Limit{Subject: budget.User("u1"), Kind: budget.Concurrent, Max: 1})
		h := e.reserve(t, call("u1"))
		e.denied(t, call("u1"))
		if d := e.svc.Refused(who("u1"), false); d != nil {
			t.Errorf("a concurrency denial remembered: %v", d)
		}
		h.Settle(settled(10))
	})

	t.Run("in flight", func(t *testing.T) {
		e := newEnv(t, budget.Options{DefaultOutputTokens: 100})
		// Room for one call's estimate, not two: the second is refused
		// for the first's hold, which may come back.
		e.limit(t, budget.Limit{Subject: budget.User("u1"), Kind: budget.SpendPerDay, Max: 400_000})
		h := e.reserve(t, call("u1"))
		if d := e.denied(t, call("u1")); !d.InFlight {
			t.Fatalf("denial %v, want one of calls in flight", d)
		}
		if d := e.svc.Refused(who("u1"), false); d != nil {
			t.Errorf("an in-flight denial remembered: %v", d)
		}
		h.Settle(settled(10))
	})

	t.Run("requests per minute", func(t *testing.T) {
		e := newEnv(t, budget.Options{})
		e.limit(t, budget.Limit{Subject: budget.User("u1"), Kind: budget.RequestsPerMinute, Max: 1})
		e.reserve(t, call("u1")).Settle(settled(10))
		e.flush(t)
		e.denied(t, call("u1"))
		if e.svc.Refused(who("u1"), true) == nil || e.svc.Refused(who("u1"), false) == nil {
			t.Fatal("a spent requests-per-minute limit not remembered for free and paid calls")
		}
		e.clock.Advance(time.Minute) // the next minute: room again
		if d := e.svc.Refused(who("u1"), false); d != nil {
			t.Errorf("remembered into the next minute: %v", d)
		}
	})
}
