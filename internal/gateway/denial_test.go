// What the gateway tells a client about a budget denial: which kind of 429
// it is (talkide_budget in the error body), and whether a retry can pass
// soon (x-should-retry).

package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/roundtrip"
)

// budgetBody decodes a gateway error body with its budget details.
func budgetBody(t *testing.T, body string) (msg string, b *contract.BudgetDenial) {
	t.Helper()
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string                 `json:"type"`
			Message string                 `json:"message"`
			Budget  *contract.BudgetDenial `json:"talkide_budget"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Type != "error" {
		t.Fatalf("not an Anthropic error body (%v): %s", err, body)
	}
	if e.Error.Type != errRateLimit {
		t.Errorf("error type %q, want %q (what SDKs parse as a rate limit)", e.Error.Type, errRateLimit)
	}
	return e.Error.Message, e.Error.Budget
}

func i64(v int64) *int64 { return &v }

// TestBudgetDenialDetails: a limit that is spent for the day answers with
// x-should-retry: false, Retry-After until midnight and the limit's
// details; a concurrency limit that only calls in flight fill answers
// without x-should-retry (a retry soon may pass) and a short Retry-After.
func TestBudgetDenialDetails(t *testing.T) {
	now := time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC)
	midnight := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	svc := newBudget(t, &budget.Options{Now: func() time.Time { return now }})
	release := make(chan struct{})
	var blocking atomic.Bool
	inUpstream := make(chan struct{}, 1)
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if blocking.Load() {
			inUpstream <- struct{}{}
			<-release
		}
		fakeAnthropic().ServeHTTP(w, r)
	}), &Options{Budget: svc})

	// Spend: one call without limits, $0.00002815 (cannedJSON).
	if resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), requestBody); resp.StatusCode != 200 {
		t.Fatalf("first call: status %d", resp.StatusCode)
	}
	h.waitServed(t)
	flush(t, svc)

	t.Run("daily spent", func(t *testing.T) {
		if err := svc.SetLimit(t.Context(), budget.Limit{Subject: budget.User(convA.UserID), Kind: budget.SpendPerDay, Max: 20_000}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.DeleteLimit(context.Background(), budget.User(convA.UserID), budget.SpendPerDay) })
		resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), requestBody)
		body := readAll(t, resp.Body)
		h.waitServed(t)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("status %d, want 429: %s", resp.StatusCode, body)
		}
		if got := resp.Header.Get("X-Should-Retry"); got != "false" {
			t.Errorf("X-Should-Retry = %q, want false: no retry passes before midnight", got)
		}
		wantWait := int64(midnight.Sub(now) / time.Second)
		if got := resp.Header.Get("Retry-After"); got != strconv.FormatInt(wantWait, 10) {
			t.Errorf("Retry-After = %q, want %d", got, wantWait)
		}
		msg, b := budgetBody(t, body)
		if b == nil {
			t.Fatalf("no talkide_budget in %s", body)
		}
		if b.NeedUSD == "" || b.NeedUSD == "0.00" {
			t.Errorf("need_usd = %q, want what the call needs", b.NeedUSD)
		}
		b.NeedUSD = "" // an estimate, from the user's history
		want := &contract.BudgetDenial{
			Scope: "user", Subject: convA.UserID, Kind: "spend_per_day",
			MaxUSD: "0.00002", UsedUSD: "0.00002815", HeldUSD: "0.00",
			ResetsAt: &midnight, RetryAfterSeconds: wantWait,
		}
		if diff := cmp.Diff(want, b); diff != "" {
			t.Errorf("talkide_budget (-want +got):\n%s", diff)
		}
		if !strings.HasPrefix(msg, contract.BudgetMessagePrefix) {
			t.Errorf("message %q does not start with %q", msg, contract.BudgetMessagePrefix)
		}
	})

	t.Run("tokens per day", func(t *testing.T) {
		if err := svc.SetLimit(t.Context(), budget.Limit{Subject: budget.Env(convA.Tenant, convA.Env), Kind: budget.TokensPerDay, Max: 10}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			svc.DeleteLimit(context.Background(), budget.Env(convA.Tenant, convA.Env), budget.TokensPerDay)
		})
		resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), requestBody)
		body := readAll(t, resp.Body)
		h.waitServed(t)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Should-Retry") != "false" {
			t.Fatalf("status %d, X-Should-Retry %q; want 429, false", resp.StatusCode, resp.Header.Get("X-Should-Retry"))
		}
		_, b := budgetBody(t, body)
		if b == nil || b.Need == nil {
			t.Fatalf("talkide_budget %+v, want counts", b)
		}
		b.Need = nil
		want := &contract.BudgetDenial{
			Scope: "env", Subject: "acme/prod", Kind: "tokens_per_day",
			Max: i64(10), Used: i64(21), Held: i64(0), // cannedJSON: 12 input, 3 cache writes, 6 output
			ResetsAt: &midnight, RetryAfterSeconds: int64(midnight.Sub(now) / time.Second),
		}
		if diff := cmp.Diff(want, b); diff != "" {
			t.Errorf("talkide_budget (-want +got):\n%s", diff)
		}
	})

	t.Run("calls in flight", func(t *testing.T) {
		if err := svc.SetLimit(t.Context(), budget.Limit{Subject: budget.User(convA.UserID), Kind: budget.Concurrent, Max: 1}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.DeleteLimit(context.Background(), budget.User(convA.UserID), budget.Concurrent) })
		blocking.Store(true)
		req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/messages", strings.NewReader(requestBody))
		req.Header.Set("X-Worker-Token", h.mint(convA))
		first := roundtrip.Status(http.DefaultClient, req)
		select {
		case <-inUpstream:
		case <-time.After(waitLimit):
			t.Fatal("the first call never reached the upstream")
		}
		blocking.Store(false)
		resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), requestBody)
		body := readAll(t, resp.Body)
		h.waitServed(t)
		close(release)
		if st := <-first; st != 200 {
			t.Errorf("the call in flight: status %d", st)
		}
		h.waitServed(t)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("status %d, want 429: %s", resp.StatusCode, body)
		}
		if got := resp.Header.Get("X-Should-Retry"); got != "" {
			t.Errorf("X-Should-Retry = %q, want none: a retry after the call in flight may pass", got)
		}
		if got := resp.Header.Get("Retry-After"); got != "2" {
			t.Errorf("Retry-After = %q, want the in-flight retry (2 s)", got)
		}
		_, b := budgetBody(t, body)
		want := &contract.BudgetDenial{
			Scope: "user", Subject: convA.UserID, Kind: "concurrent_requests",
			Max: i64(1), Used: i64(0), Held: i64(1), Need: i64(1),
			InFlight: true, RetryAfterSeconds: 2,
		}
		if diff := cmp.Diff(want, b); diff != "" {
			t.Errorf("talkide_budget (-want +got):\n%s", diff)
		}
	})
}

// TestBudgetDenialNotRetriedBySDK: the official SDK, with its default
// retries, returns a denial that cannot pass soon after one attempt,
// instead of sleeping for the hours its Retry-After asks.
func TestBudgetDenialNotRetriedBySDK(t *testing.T) {
	svc := newBudget(t, nil)
	h := newHarness(t, fakeAnthropic(), &Options{Budget: svc})
	if err := svc.SetLimit(t.Context(), budget.Limit{Subject: budget.User(convA.UserID), Kind: budget.SpendPerDay, Max: 0}); err != nil {
		t.Fatal(err)
	}
	var attempts atomic.Int64
	client := anthropic.NewClient(
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(h.url),
		option.WithAuthToken(h.mint(convA)),
		option.WithHTTPClient(http.DefaultClient),
		option.WithMaxRetries(2),
		option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			attempts.Add(1)
			return next(r)
		}),
	)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := client.Messages.New(ctx, sdkParams)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("the SDK was still waiting after 5 s: it honoured the Retry-After")
	}
	checkSDK429(t, err)
	if n := attempts.Load(); n != 1 {
		t.Errorf("%d attempts, want 1", n)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the denial took %v", d)
	}
	apiErr, _ := errors.AsType[*anthropic.Error](err)
	_, b := budgetBody(t, apiErr.RawJSON())
	if b == nil || b.Kind != "spend_per_day" || b.MaxUSD != "0.00" {
		t.Errorf("talkide_budget = %+v, want the daily limit of $0", b)
	}
}

// TestHardStopDetails: the error event that ends a stream a hard limit cut
// off carries the denial's details, marked mid_stream.
func TestHardStopDetails(t *testing.T) {
	svc := newBudget(t, &budget.Options{DefaultOutputTokens: 100})
	h := newHarness(t, hardStreamUpstream(1_000_000, make(chan struct{})), &Options{Budget: svc})
	if err := svc.SetLimit(t.Context(), budget.Limit{Subject: budget.User(convA.UserID), Kind: budget.SpendPerDay, Max: 1_000_000, Hard: true}); err != nil {
		t.Fatal(err)
	}
	client := sdkClient(h, h.mint(convA), convA.ID)
	stream := client.Messages.NewStreaming(t.Context(), sdkParams)
	for stream.Next() {
	}
	apiErr, ok := errors.AsType[*anthropic.Error](stream.Err())
	if !ok {
		t.Fatalf("stream error %v, want an *anthropic.Error from the error event", stream.Err())
	}
	h.waitServed(t)
	msg, b := budgetBody(t, apiErr.RawJSON())
	if b == nil {
		t.Fatalf("no talkide_budget in the error event %s", apiErr.RawJSON())
	}
	if !b.MidStream || !b.Hard || b.Kind != "spend_per_day" || b.MaxUSD != "0.001" || b.ResetsAt == nil {
		t.Errorf("talkide_budget = %+v, want the hard daily limit, mid_stream, with its reset", b)
	}
	if !strings.HasPrefix(msg, contract.BudgetMessagePrefix) || !strings.Contains(msg, "cut off") || !strings.Contains(msg, "room frees up at") {
		t.Errorf("message %q, want the denial, the cut and when room frees up", msg)
	}
}

// TestPassesSoon: when the gateway leaves a denied call's retry to its
// client.
func TestPassesSoon(t *testing.T) {
	now := time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC)
	rpm := budget.Limit{Subject: budget.User("u"), Kind: budget.RequestsPerMinute, Max: 10}
	day := budget.Limit{Subject: budget.User("u"), Kind: budget.SpendPerDay, Max: 1000}
	tests := map[string]struct {
		d    budget.Denial
		soon bool
	}{
		"calls in flight": {budget.Denial{Limit: day, Used: 100, Held: 950, Need: 100, InFlight: true, RetryAfter: 2 * time.Second}, true},
		"the minute ends in 5 s": {budget.Denial{Limit: rpm, Used: 10, Need: 1,
			Resets: now.Add(5 * time.Second), RetryAfter: 5 * time.Second}, true},
		"the minute ends in 30 s": {budget.Denial{Limit: rpm, Used: 10, Need: 1,
			Resets: now.Add(30 * time.Second), RetryAfter: 30 * time.Second}, false},
		"the day is spent": {budget.Denial{Limit: day, Used: 1000, Need: 100,
			Resets: now.Add(7 * time.Hour), RetryAfter: 7 * time.Hour}, false},
		"the day ends in 3 s but the call alone is more": {budget.Denial{Limit: day, Need: 2000,
			Resets: now.Add(3 * time.Second), RetryAfter: 3 * time.Second}, false},
		"no concurrency at all": {budget.Denial{Limit: budget.Limit{Subject: budget.User("u"), Kind: budget.Concurrent, Max: 0},
			Need: 1, RetryAfter: 2 * time.Second}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := passesSoon(&tc.d); got != tc.soon {
				t.Errorf("passesSoon = %v, want %v", got, tc.soon)
			}
			h := http.Header{}
			e := budgetError(h, &tc.d)
			if got, want := h.Get("X-Should-Retry") == "false", !tc.soon; got != want {
				t.Errorf("X-Should-Retry %q", h.Get("X-Should-Retry"))
			}
			if h.Get("Retry-After") == "" || e.Status != http.StatusTooManyRequests || e.Type != errRateLimit || e.Budget == nil {
				t.Errorf("budgetError = %+v, Retry-After %q", e, h.Get("Retry-After"))
			}
		})
	}
}
