package auth

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/fakeclock"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/postgres"
	"github.com/talkide/platform/internal/store/postgres/pgtest"
	"github.com/talkide/platform/internal/store/sqlite"
	"github.com/talkide/platform/internal/store/storetest"
)

// replicaAuths returns n authenticators, each on a PostgreSQL store of its
// own (its own connection pool) on one database, as n replicas have them,
// sharing a clock; alice and bob are members of acme.
func replicaAuths(t *testing.T, n int, opts Options) ([]*Authenticator, store.Store, *fakeclock.Clock) {
	t.Helper()
	url := pgtest.URL(t)
	clk := fakeclock.New(t0)
	opts.Now = clk.Now
	var as []*Authenticator
	var first store.Store
	for i := range n {
		st := storetest.Open(t, postgres.Open, url)
		if i == 0 {
			first = st
			ctx := t.Context()
			must(t, st.PutEnv(ctx, store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://w", CreatedAt: t0}))
			for _, u := range []string{"alice", "bob"} {
				must(t, st.PutUser(ctx, store.User{ID: u, Name: u, CreatedAt: t0}))
				_, err := st.PutMembership(ctx, store.Membership{UserID: u, Tenant: "acme", Role: store.RoleMember, CreatedAt: t0})
				must(t, err)
			}
		}
		a, err := New(st, &opts)
		must(t, err)
		if a.rates == nil {
			t.Fatal("an authenticator on PostgreSQL counts in memory")
		}
		as = append(as, a)
	}
	return as, first, clk
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestSharedTokenLimitAcrossReplicas: one API token's requests spread over
// two replicas (and sent at once) get the one limit, not one each; the
// 429 says when the window ends; the next window starts afresh; another
// token is not held back.
func TestSharedTokenLimitAcrossReplicas(t *testing.T) {
	as, st, clk := replicaAuths(t, 2, Options{TokenPerMinute: 10})
	tok, _, err := IssueAPIToken(t.Context(), st, "alice", "", 0, t0)
	must(t, err)
	other, _, err := IssueAPIToken(t.Context(), st, "bob", "", 0, t0)
	must(t, err)
	h := http.Header{"Authorization": {"Bearer " + tok}}
	clk.Advance(15 * time.Second)

	// 24 requests at once, alternating between the replicas.
	var mu sync.Mutex
	passed, limited := 0, 0
	var retry string
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Go(func() {
			_, err := as[i%2].Authenticate(request(h, "192.0.2.1:5"))
			mu.Lock()
			defer mu.Unlock()
			switch status(err) {
			case http.StatusOK:
				passed++
			case http.StatusTooManyRequests:
				limited++
				retry = retryAfter(err)
			default:
				t.Errorf("request %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if passed != 10 || limited != 14 {
		t.Fatalf("%d passed and %d were limited across two replicas, want 10 and 14", passed, limited)
	}
	if retry != "45" {
		t.Errorf("Retry-After %q, want 45 (the window's end)", retry)
	}
	if _, err := as[1].Authenticate(request(http.Header{"Authorization": {"Bearer " + other}}, "192.0.2.1:5")); err != nil {
		t.Errorf("another token: %v", err)
	}
	clk.Advance(45 * time.Second)
	for i, a := range as {
		if _, err := a.Authenticate(request(h, "192.0.2.1:5")); err != nil {
			t.Errorf("replica %d in the next window: %v", i, err)
		}
	}
}

// TestSharedFailureAndLoginLimitsAcrossReplicas: refused credentials from
// one source count on every replica, and once they reach the limit each
// replica answers 429 before any lookup, a valid token included; logins
// from one source share their limit too. Sweeping keeps the current
// window's counts only.
func TestSharedFailureAndLoginLimitsAcrossReplicas(t *testing.T) {
	as, st, clk := replicaAuths(t, 2, Options{LoginsPerMinute: 6})
	tok, _, err := IssueAPIToken(t.Context(), st, "alice", "", 0, t0)
	must(t, err)
	bad := http.Header{"Authorization": {"Bearer tka_abc.0123456789abcdef0123"}}
	for i := range failuresPerMinute {
		if _, err := as[i%2].Authenticate(request(bad, "198.51.100.7:1")); status(err) != http.StatusUnauthorized {
			t.Fatalf("failure %d: %v, want 401", i, err)
		}
	}
	for i, a := range as {
		_, err := a.Authenticate(request(http.Header{"Authorization": {"Bearer " + tok}}, "198.51.100.7:1"))
		if status(err) != http.StatusTooManyRequests {
			t.Errorf("replica %d after %d failures spread over both: %v, want 429", i, failuresPerMinute, err)
		}
	}
	if _, err := as[0].Authenticate(request(http.Header{"Authorization": {"Bearer " + tok}}, "198.51.100.8:1")); err != nil {
		t.Errorf("another source: %v", err)
	}

	ctx := context.Background()
	n := 0
	for i := range 10 {
		if ok, _ := as[i%2].logins.allow(ctx, "203.0.113.9", clk.Now()); ok {
			n++
		}
	}
	if n != 6 {
		t.Errorf("%d of 10 logins from one source over two replicas passed, want 6", n)
	}

	clk.Advance(time.Minute)
	if _, err := as[1].Authenticate(request(bad, "198.51.100.7:1")); status(err) != http.StatusUnauthorized {
		t.Errorf("in the next window: %v, want 401 (not limited)", err)
	}
	clk.Advance(time.Minute)
	swept, err := as[0].SweepRates(ctx)
	must(t, err)
	// The first window's counts: the failures and the logins from their
	// sources, and the valid token's one request.
	if swept != 3 {
		t.Errorf("sweeping two windows later deleted %d counts, want the first window's 3", swept)
	}
	if left, err := as[0].rates.RateHits(ctx, "failure", "198.51.100.7", t0.Add(time.Minute)); err != nil || left != 1 {
		t.Errorf("the previous window's count after the sweep: %d, %v; want it kept (1)", left, err)
	}
}

// retryAfter is the Retry-After a limit answered with.
func retryAfter(err error) string {
	var he *httpapi.Error
	if errors.As(err, &he) {
		return he.RetryAfter
	}
	return ""
}

// BenchmarkAuthenticateToken: one API token's request authenticated, its
// limits counted in memory (SQLite; PostgreSQL with the in-memory limiters
// put back, to show what sharing costs) or in PostgreSQL's shared windows
// (the limit is set high enough never to refuse).
func BenchmarkAuthenticateToken(b *testing.B) {
	for _, kind := range []string{"sqlite-memory", "postgres-memory", "postgres-shared"} {
		b.Run(kind, func(b *testing.B) {
			var st store.Store
			if kind != "sqlite-memory" {
				s, err := postgres.Open(b.Context(), pgtest.URL(b), nil)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { s.Close() })
				st = s
			} else {
				s, err := sqlite.Open(b.Context(), ":memory:", nil)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { s.Close() })
				st = s
			}
			ctx := b.Context()
			if err := st.PutUser(ctx, store.User{ID: "alice", Name: "alice", CreatedAt: t0}); err != nil {
				b.Fatal(err)
			}
			a, err := New(st, &Options{TokenPerMinute: 1e9})
			if err != nil {
				b.Fatal(err)
			}
			if kind == "postgres-memory" {
				a.tokens = newLimiters(1e9, 1e6, maxLimiterKeys)
				a.failures = newLimiters(failuresPerMinute, failuresPerMinute, maxLimiterKeys)
			}
			tok, _, err := IssueAPIToken(ctx, st, "alice", "", 0, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			h := http.Header{"Authorization": {"Bearer " + tok}}
			b.ResetTimer()
			for b.Loop() {
				if _, err := a.Authenticate(request(h, "192.0.2.1:5")); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
