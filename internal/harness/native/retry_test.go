package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/harness"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		h    http.Header
		wait time.Duration
		ok   bool
	}{
		"none":                 {http.Header{}, 0, false},
		"seconds":              {http.Header{"Retry-After": {"25200"}}, 7 * time.Hour, true},
		"fractional seconds":   {http.Header{"Retry-After": {"1.5"}}, 1500 * time.Millisecond, true},
		"milliseconds":         {http.Header{"Retry-After-Ms": {"250"}}, 250 * time.Millisecond, true},
		"milliseconds first":   {http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"3600"}}, 250 * time.Millisecond, true},
		"bad milliseconds":     {http.Header{"Retry-After-Ms": {"soon"}, "Retry-After": {"3"}}, 3 * time.Second, true},
		"HTTP date":            {http.Header{"Retry-After": {"Tue, 01 Dec 2026 20:00:00 GMT"}}, 3 * time.Hour, true},
		"HTTP date, past":      {http.Header{"Retry-After": {"Tue, 01 Dec 2026 16:59:58 GMT"}}, -2 * time.Second, true},
		"HTTP date, RFC 850":   {http.Header{"Retry-After": {"Tuesday, 01-Dec-26 17:00:30 GMT"}}, 0, false}, // the SDK reads no other date form
		"garbage":              {http.Header{"Retry-After": {"later"}}, 0, false},
		"infinite":             {http.Header{"Retry-After": {"Inf"}}, math.MaxInt64, true},
		"huge":                 {http.Header{"Retry-After": {"1e300"}}, math.MaxInt64, true},
		"minus infinite":       {http.Header{"Retry-After": {"-Inf"}}, math.MinInt64, true},
		"not a number":         {http.Header{"Retry-After": {"NaN"}}, 0, true},
		"negative":             {http.Header{"Retry-After": {"-5"}}, -5 * time.Second, true},
		"zero":                 {http.Header{"Retry-After": {"0"}}, 0, true},
		"milliseconds, zero":   {http.Header{"Retry-After-Ms": {"0"}}, 0, true},
		"empty, then seconds":  {http.Header{"Retry-After-Ms": {""}, "Retry-After": {"2"}}, 2 * time.Second, true},
		"seconds with a space": {http.Header{"Retry-After": {" 2"}}, 0, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			wait, ok := retryAfter(tc.h, now)
			if wait != tc.wait || ok != tc.ok {
				t.Errorf("retryAfter = %v, %v; want %v, %v", wait, ok, tc.wait, tc.ok)
			}
		})
	}
}

// refusing answers the first n requests with status and headers, then
// passes to next; it counts every request.
type refusing struct {
	n      int64
	status int
	header http.Header
	body   string
	next   http.Handler
	seen   atomic.Int64
}

func (r *refusing) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if r.seen.Add(1) > r.n {
		r.next.ServeHTTP(w, req)
		return
	}
	for k, vs := range r.header {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(r.status)
	body := r.body
	if body == "" {
		typ := map[int]string{429: "rate_limit_error", 529: "overloaded_error"}[r.status]
		if typ == "" {
			typ = "api_error"
		}
		body = fmt.Sprintf(`{"type":"error","error":{"type":%q,"message":"slow down"}}`, typ)
	}
	io.WriteString(w, body)
}

// newRetryFixture is a fixture whose client retries as the SDK does by
// default (twice), so that what the harness's middleware changes shows.
func newRetryFixture(t *testing.T, opts *Options, up *refusing) *fixture {
	t.Helper()
	f := newFixture(t, nil, nil) // for its simulator and transcript
	up.next = f.sim
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	client := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey(simKey), option.WithMaxRetries(2))
	f.h = New(client, opts)
	f.workspace = filepath.Join(t.TempDir(), "ws")
	return f
}

// TestBoundedRetries: a Retry-After the harness will not wait out ends the
// turn at once with its failure; a short one is retried as the SDK does.
func TestBoundedRetries(t *testing.T) {
	long := http.Header{"Retry-After": {"25200"}}
	tests := map[string]struct {
		status   int
		header   http.Header
		refusals int64
		attempts int64  // requests the upstream saw
		code     string // "" : the turn succeeds
		message  string // in the failure's message
	}{
		"429, long Retry-After": {429, long, 99, 1, contract.FailRateLimited, "it asks to wait 7h0m0s, until "},
		"429, long, x-should-retry: true": {429, http.Header{"Retry-After": {"25200"}, "X-Should-Retry": {"true"}}, 99, 1,
			contract.FailRateLimited, "it asks to wait 7h0m0s"},
		"429, long retry-after-ms":  {429, http.Header{"Retry-After-Ms": {"60000"}}, 99, 1, contract.FailRateLimited, "it asks to wait 1m0s"},
		"429, long HTTP date":       {429, http.Header{"Retry-After": {time.Now().Add(2 * time.Hour).UTC().Format(http.TimeFormat)}}, 99, 1, contract.FailRateLimited, "before a retry"}, // the date has whole seconds
		"529, long Retry-After":     {529, long, 99, 1, contract.FailOverloaded, "it asks to wait 7h0m0s"},
		"503, long Retry-After":     {503, long, 99, 1, contract.FailModelError, "it asks to wait 7h0m0s"},
		"429, short Retry-After":    {429, http.Header{"Retry-After-Ms": {"20"}}, 1, 2, "", ""},
		"529, short Retry-After":    {529, http.Header{"Retry-After": {"0"}}, 2, 3, "", ""},
		"429, just within":          {429, http.Header{"Retry-After-Ms": {"50"}}, 1, 2, "", ""},
		"429, short, still failing": {429, http.Header{"Retry-After-Ms": {"10"}}, 99, 3, contract.FailRateLimited, "the model API is rate limited; try again later"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			up := &refusing{n: tc.refusals, status: tc.status, header: tc.header}
			f := newRetryFixture(t, &Options{MaxRetryWait: 10 * time.Second}, up)
			start := time.Now()
			_, err := f.run(t, "hello", &sink{})
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("the turn took %v", d)
			}
			if n := up.seen.Load(); n != tc.attempts {
				t.Errorf("the upstream saw %d requests, want %d", n, tc.attempts)
			}
			if tc.code == "" {
				if err != nil {
					t.Fatalf("RunTurn: %v", err)
				}
				return
			}
			f2 := harness.Failure(err)
			if f2.Code != tc.code || !f2.Retryable || f2.HTTPStatus != tc.status || !strings.Contains(f2.Message, tc.message) {
				t.Errorf("failure %+v, want %s, retryable, status %d, message with %q", f2, tc.code, tc.status, tc.message)
			}
		})
	}
}

// gatewayDenial is the gateway's answer to a call a spent daily limit
// refuses.
const gatewayDenial = `{"type":"error","error":{"type":"rate_limit_error",` +
	`"message":"budget: user u1 spending limit per day reached: $5.01 used, $0.00 held by calls in flight, this call needs $0.02, the limit is $5.00; room frees up at 2026-12-02T00:00:00Z",` +
	`"talkide_budget":{"scope":"user","subject":"u1","kind":"spend_per_day","max_usd":"5.00","used_usd":"5.01","held_usd":"0.00","need_usd":"0.02","resets_at":"2026-12-02T00:00:00Z","retry_after_seconds":25200}}}`

// TestBudgetDenied: the gateway's denial ends the turn at once with
// budget_exhausted and the limit's details, even when the gateway forgot
// x-should-retry: the Retry-After is too long to wait out.
func TestBudgetDenied(t *testing.T) {
	up := &refusing{n: 99, status: 429, header: http.Header{"Retry-After": {"25200"}}, body: gatewayDenial}
	f := newRetryFixture(t, nil, up)
	start := time.Now()
	_, err := f.run(t, "hello", &sink{})
	if d := time.Since(start); d > time.Second {
		t.Errorf("the turn took %v, want it ended at once", d)
	}
	if n := up.seen.Load(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
	resets := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	want := contract.TurnFailure{
		Code: contract.FailBudgetExhausted, HTTPStatus: 429,
		Message: "the budget is exhausted: user u1 spending limit per day reached: $5.01 used, $0.00 held by calls in flight, this call needs $0.02, the limit is $5.00; room frees up at 2026-12-02T00:00:00Z",
		Budget: &contract.BudgetDenial{Scope: "user", Subject: "u1", Kind: "spend_per_day",
			MaxUSD: "5.00", UsedUSD: "5.01", HeldUSD: "0.00", NeedUSD: "0.02", ResetsAt: &resets, RetryAfterSeconds: 25200},
	}
	if diff := cmp.Diff(want, harness.Failure(err)); diff != "" {
		t.Errorf("failure (-want +got):\n%s", diff)
	}
	validateHistory(t, f.records(t))
}

// apiError builds the SDK's error for a response, as the SDK does.
func apiError(t *testing.T, status int, header http.Header, body string) *anthropic.Error {
	t.Helper()
	e := &anthropic.Error{StatusCode: status, Response: &http.Response{StatusCode: status, Header: header}}
	if err := e.UnmarshalJSON([]byte(body)); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestMapModelError(t *testing.T) {
	now := time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC)
	resets := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	cut := `{"type":"error","error":{"type":"rate_limit_error",` +
		`"message":"budget: user u1 spending limit per day reached: $4.99 used, $0.00 held by calls in flight, this call needs $0.02, the limit is $5.00; the response was cut off here; room frees up at 2026-12-02T00:00:00Z",` +
		`"talkide_budget":{"scope":"user","subject":"u1","kind":"spend_per_day","hard":true,"max_usd":"5.00","used_usd":"4.99","held_usd":"0.00","need_usd":"0.02","mid_stream":true,"resets_at":"2026-12-02T00:00:00Z","retry_after_seconds":25200}}}`
	inFlight := `{"type":"error","error":{"type":"rate_limit_error","message":"budget: user u1 limit of concurrent requests reached: 2 calls in flight, the limit is 2; retry when calls in flight have finished",` +
		`"talkide_budget":{"scope":"user","subject":"u1","kind":"concurrent_requests","max":2,"used":0,"held":2,"need":1,"in_flight":true,"retry_after_seconds":2}}}`
	two := int64(2)
	zero, one := int64(0), int64(1)
	tests := map[string]struct {
		err  error
		want contract.TurnFailure
	}{
		"budget denial": {apiError(t, 429, http.Header{"Retry-After": {"25200"}, "X-Should-Retry": {"false"}}, gatewayDenial), contract.TurnFailure{
			Code: contract.FailBudgetExhausted, HTTPStatus: 429,
			Message: "the budget is exhausted: user u1 spending limit per day reached: $5.01 used, $0.00 held by calls in flight, this call needs $0.02, the limit is $5.00; room frees up at 2026-12-02T00:00:00Z",
			Budget: &contract.BudgetDenial{Scope: "user", Subject: "u1", Kind: "spend_per_day",
				MaxUSD: "5.00", UsedUSD: "5.01", HeldUSD: "0.00", NeedUSD: "0.02", ResetsAt: &resets, RetryAfterSeconds: 25200},
		}},
		"budget, calls in flight": {apiError(t, 429, http.Header{"Retry-After": {"2"}}, inFlight), contract.TurnFailure{
			Code: contract.FailBudgetExhausted, HTTPStatus: 429, Retryable: true,
			Message: "the budget is exhausted: user u1 limit of concurrent requests reached: 2 calls in flight, the limit is 2; retry when calls in flight have finished",
			Budget:  &contract.BudgetDenial{Scope: "user", Subject: "u1", Kind: "concurrent_requests", Max: &two, Used: &zero, Held: &two, Need: &one, InFlight: true, RetryAfterSeconds: 2},
		}},
		// The SDK raises a stream's error event with the stream's status.
		"hard limit mid-stream": {apiError(t, 200, http.Header{"Content-Type": {"text/event-stream"}}, cut), contract.TurnFailure{
			Code:    contract.FailBudgetExhausted,
			Message: "the response was cut off by a hard budget limit: user u1 spending limit per day reached: $4.99 used, $0.00 held by calls in flight, this call needs $0.02, the limit is $5.00; room frees up at 2026-12-02T00:00:00Z",
			Budget: &contract.BudgetDenial{Scope: "user", Subject: "u1", Kind: "spend_per_day", Hard: true,
				MaxUSD: "5.00", UsedUSD: "4.99", HeldUSD: "0.00", NeedUSD: "0.02", MidStream: true, ResetsAt: &resets, RetryAfterSeconds: 25200},
		}},
		"upstream rate limit, long wait": {apiError(t, 429, http.Header{"Retry-After": {"3600"}}, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`), contract.TurnFailure{
			Code: contract.FailRateLimited, HTTPStatus: 429, Retryable: true,
			Message: "the model API is rate limited; it asks to wait 1h0m0s, until 2026-12-01T18:00:00Z, before a retry; try again later",
		}},
		"upstream rate limit, retried": {apiError(t, 429, http.Header{"Retry-After": {"2"}}, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`), contract.TurnFailure{
			Code: contract.FailRateLimited, HTTPStatus: 429, Retryable: true, Message: "the model API is rate limited; try again later",
		}},
		"a budget message without details is the API's": {apiError(t, 429, http.Header{}, `{"type":"error","error":{"type":"rate_limit_error","message":"budget: something"}}`), contract.TurnFailure{
			Code: contract.FailRateLimited, HTTPStatus: 429, Retryable: true, Message: "the model API is rate limited; try again later",
		}},
		"overloaded mid-stream": {apiError(t, 200, http.Header{}, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), contract.TurnFailure{
			Code: contract.FailOverloaded, HTTPStatus: 200, Retryable: true, Message: "the model is overloaded; try again shortly",
		}},
		"overloaded, long wait": {apiError(t, 529, http.Header{"Retry-After-Ms": {"120000"}}, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), contract.TurnFailure{
			Code: contract.FailOverloaded, HTTPStatus: 529, Retryable: true, Message: "the model is overloaded; it asks to wait 2m0s, until 2026-12-01T17:02:00Z, before a retry; try again shortly",
		}},
		"bad request": {apiError(t, 400, http.Header{}, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too large"}}`), contract.TurnFailure{
			Code: contract.FailModelError, HTTPStatus: 400, Message: "the model API rejected the request: max_tokens: too large",
		}},
		"a body that is not JSON": {apiError(t, 429, http.Header{}, `<html>busy</html>`), contract.TurnFailure{
			Code: contract.FailRateLimited, HTTPStatus: 429, Retryable: true, Message: "the model API is rate limited; try again later",
		}},
		"no response": {errors.New("dial tcp: connection refused"), contract.TurnFailure{
			Code: contract.FailModelError, Retryable: true, Message: "the model could not be reached",
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := harness.Failure(mapModelError(tc.err, 10*time.Second, now))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("failure (-want +got):\n%s", diff)
			}
		})
	}
}

// cutStream streams the start of a reply, then the error event with which
// the gateway ends a stream a hard limit cut off.
func cutStream(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, ev := range []string{
		`{"type":"message_start","message":{"id":"msg_cut","type":"message","role":"assistant","model":"claude-sonnet-5-5","content":[],"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Here is the first half of"}}`,
	} {
		var typ struct{ Type string }
		_ = json.Unmarshal([]byte(ev), &typ)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ.Type, ev)
	}
	fmt.Fprintf(w, "event: error\ndata: %s\n\n", `{"type":"error","error":{"type":"rate_limit_error",`+
		`"message":"budget: user u1 spending limit per day reached: $4.99 used, $0.00 held by calls in flight, this call needs $0.02, the limit is $5.00; the response was cut off here; room frees up at 2026-12-02T00:00:00Z",`+
		`"talkide_budget":{"scope":"user","subject":"u1","kind":"spend_per_day","hard":true,"max_usd":"5.00","used_usd":"4.99","held_usd":"0.00","need_usd":"0.02","mid_stream":true,"resets_at":"2026-12-02T00:00:00Z","retry_after_seconds":25200}}}`)
}

// TestHardStopMidStream: a reply cut off by a hard limit ends the turn with
// budget_exhausted saying so; the text that did arrive stays in the
// transcript, which remains valid for the next turn.
func TestHardStopMidStream(t *testing.T) {
	var calls atomic.Int64
	f := newFixture(t, nil, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 1 {
				cutStream(w)
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	s := &sink{}
	_, err := f.run(t, "write a long essay", s)
	fl := harness.Failure(err)
	if fl.Code != contract.FailBudgetExhausted || fl.Retryable || fl.HTTPStatus != 0 || fl.Budget == nil || !fl.Budget.MidStream ||
		!strings.HasPrefix(fl.Message, "the response was cut off by a hard budget limit: user u1 spending limit per day reached") ||
		!strings.HasSuffix(fl.Message, "; room frees up at 2026-12-02T00:00:00Z") || strings.Contains(fl.Message, "cut off here") {
		t.Errorf("failure %+v", fl)
	}
	var deltas string
	for _, ev := range s.Events() {
		if ev.Kind == contract.KindTextDelta {
			deltas += ev.Text
		}
	}
	if deltas != "Here is the first half of" {
		t.Errorf("streamed text %q", deltas)
	}
	recs := f.records(t)
	validateHistory(t, recs)
	if len(recs) != 2 || !strings.Contains(string(recs[1]), "Here is the first half of") {
		t.Errorf("transcript %s, want the user's message and the text that arrived", recs)
	}
	// The next turn goes on from there.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.h.RunTurn(ctx, f.turn("go on", &sink{})); err != nil {
		t.Fatalf("the next turn: %v", err)
	}
}

// FuzzRetryAfter: any header values parse without panicking, and a wait
// that is not read is zero.
func FuzzRetryAfter(f *testing.F) {
	for _, seed := range [][2]string{{"", "25200"}, {"250", ""}, {"soon", "3"}, {"", "Tue, 01 Dec 2026 20:00:00 GMT"}, {"NaN", "-Inf"}, {"1e309", ""}} {
		f.Add(seed[0], seed[1])
	}
	now := time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, ms, s string) {
		h := http.Header{}
		if ms != "" {
			h.Set("Retry-After-Ms", ms)
		}
		if s != "" {
			h.Set("Retry-After", s)
		}
		wait, ok := retryAfter(h, now)
		if !ok && wait != 0 {
			t.Errorf("retryAfter(%q, %q) = %v, false", ms, s, wait)
		}
		res := &http.Response{StatusCode: 429, Header: h}
		mw := boundRetries(10*time.Second, func() time.Time { return now })
		got, _ := mw(&http.Request{}, func(*http.Request) (*http.Response, error) { return res, nil })
		if marked := got.Header.Get("X-Should-Retry") == "false"; marked != (ok && wait > 10*time.Second) {
			t.Errorf("wait %v (%v): marked %v", wait, ok, marked)
		}
	})
}
