package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/store"
)

// fakeMetrics records what the gateway reports.
type fakeMetrics struct {
	mu        sync.Mutex
	requests  []RequestInfo // guarded by mu
	forward   int           // guarded by mu; ForwardLatency calls
	firstByte int           // guarded by mu
	denials   []string      // guarded by mu; "tenant env scope kind stage"
	negative  bool          // guarded by mu; a latency below zero was seen
}

func (f *fakeMetrics) Request(r RequestInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r)
}

func (f *fakeMetrics) ForwardLatency(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forward++
	f.negative = f.negative || d < 0
}

func (f *fakeMetrics) FirstByteLatency(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.firstByte++
	f.negative = f.negative || d < 0
}

func (f *fakeMetrics) BudgetDenied(tenant, env string, d *budget.Denial) {
	f.mu.Lock()
	defer f.mu.Unlock()
	stage := "admission"
	if d.MidStream {
		stage = "mid_stream"
	}
	f.denials = append(f.denials, strings.Join([]string{tenant, env, string(d.Limit.Subject.Scope), string(d.Limit.Kind), stage}, " "))
}

func (f *fakeMetrics) snapshot() (reqs []RequestInfo, forward, firstByte int, denials []string, negative bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]RequestInfo(nil), f.requests...), f.forward, f.firstByte, append([]string(nil), f.denials...), f.negative
}

// TestMetricsHooks: every answered request is reported once with its
// tenant-env, model and status; forwarded calls have both overhead
// latencies; budget denials are reported at admission and mid-stream.
func TestMetricsHooks(t *testing.T) {
	m := &fakeMetrics{}
	svc := newBudget(t, &budget.Options{DefaultOutputTokens: 100})
	h := newHarness(t, fakeAnthropic(), &Options{Budget: svc, Metrics: m})
	if err := svc.SetLimit(t.Context(), budget.Limit{Subject: budget.Env(convC.Tenant, convC.Env), Kind: budget.RequestsPerMinute, Max: 0}); err != nil {
		t.Fatal(err)
	}

	check := func(resp *http.Response, status int) {
		t.Helper()
		readAll(t, resp.Body)
		if resp.StatusCode != status {
			t.Fatalf("status %d, want %d", resp.StatusCode, status)
		}
		h.waitServed(t)
	}
	check(h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), requestBody), 200)
	check(h.post(t, "/v1/messages", tokenHeader(h.mint(convB)), streamBody), 200)
	check(h.post(t, "/v1/messages", nil, requestBody), 401)
	check(h.post(t, "/v1/messages", tokenHeader(h.mint(convC)), requestBody), 429)
	check(h.post(t, "/v1/messages/count_tokens", tokenHeader(h.mint(convA)), requestBody), 200)
	check(h.post(t, "/v1/messages/count_tokens", tokenHeader(h.mint(convC)), requestBody), 429) // free, but a request

	reqs, forward, firstByte, denials, negative := m.snapshot()
	want := []RequestInfo{
		{Tenant: "acme", Env: "prod", Model: testModel, Status: 200, Upstream: true},
		{Tenant: "acme", Env: "prod", Model: testModel, Status: 200, Upstream: true},
		{Status: 401},
		{Tenant: "globex", Env: "dev", Model: "claude-req-model", Status: 429},
		{Tenant: "acme", Env: "prod", Model: "claude-req-model", Status: 200, Upstream: true}, // the request's: count_tokens answers name none
		// Refused on its headers: the limit had nothing left when it
		// refused the call before, so the body, and its model, was not read.
		{Tenant: "globex", Env: "dev", Model: "", Status: 429},
	}
	if diff := cmp.Diff(want, reqs); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	if forward != 3 || firstByte != 3 || negative {
		t.Errorf("forward latencies %d, first-byte latencies %d (negative: %v); want 3 each, one per forwarded call", forward, firstByte, negative)
	}
	if diff := cmp.Diff([]string{"globex dev env requests_per_minute admission", "globex dev env requests_per_minute admission"}, denials); diff != "" {
		t.Errorf("denials (-want +got):\n%s", diff)
	}
}

// TestMetricsUnreachableAndCut: an unreachable upstream is a 502 of the
// gateway's own; a hard limit's cut is a mid-stream denial of a call that
// the client got as 200.
func TestMetricsUnreachableAndCut(t *testing.T) {
	m := &fakeMetrics{}
	up := httptest.NewServer(http.NotFoundHandler())
	closed := up.URL
	up.Close()
	h := newHarnessURL(t, closed, &Options{Metrics: m})
	resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), requestBody)
	readAll(t, resp.Body)
	h.waitServed(t)
	reqs, forward, firstByte, _, _ := m.snapshot()
	if diff := cmp.Diff([]RequestInfo{{Tenant: "acme", Env: "prod", Model: "claude-req-model", Status: 502}}, reqs); diff != "" {
		t.Errorf("unreachable (-want +got):\n%s", diff)
	}
	if forward != 1 || firstByte != 0 {
		t.Errorf("unreachable: %d forward and %d first-byte latencies, want 1 and 0", forward, firstByte)
	}

	m = &fakeMetrics{}
	svc := newBudget(t, &budget.Options{DefaultOutputTokens: 100})
	h = newHarness(t, hardStreamUpstream(1_000_000, make(chan struct{})), &Options{Budget: svc, Metrics: m})
	if err := svc.SetLimit(t.Context(), budget.Limit{Subject: budget.User(convA.UserID), Kind: budget.SpendPerDay, Max: 1_000_000, Hard: true}); err != nil {
		t.Fatal(err)
	}
	resp = h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), streamBody)
	if body := readAll(t, resp.Body); !strings.Contains(body, "cut off") {
		t.Fatalf("the stream was not cut: ...%s", body[max(len(body)-200, 0):])
	}
	h.waitServed(t)
	reqs, _, _, denials, _ := m.snapshot()
	if diff := cmp.Diff([]RequestInfo{{Tenant: "acme", Env: "prod", Model: testModel, Status: 200, Upstream: true}}, reqs); diff != "" {
		t.Errorf("cut (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"acme prod user spend_per_day mid_stream"}, denials); diff != "" {
		t.Errorf("cut denials (-want +got):\n%s", diff)
	}
}

// TestMetricsUnprovisionedTenant: a validly signed token whose claims name
// a tenant-env nobody provisioned is refused, and its tenant and env reach
// no metrics label (they would make a new series for every tenant a token
// can claim); a refusal after authorisation (a bad model) is labelled with
// the conversation's tenant-env from the store.
func TestMetricsUnprovisionedTenant(t *testing.T) {
	m := &fakeMetrics{}
	h := newHarness(t, fakeAnthropic(), &Options{Metrics: m})
	invented := func(id string) store.Conversation {
		return store.Conversation{ID: id, Tenant: "invented-tenant", Env: "invented-env"}
	}
	for _, c := range []struct {
		conv   store.Conversation
		body   string
		status int
	}{
		{invented(convA.ID), requestBody, 403},       // a provisioned conversation, another tenant-env
		{invented("conv-nowhere"), requestBody, 403}, // a conversation that does not exist
		{convA, `{"model":"bad model","max_tokens":1}`, 400},
	} {
		resp := h.post(t, "/v1/messages", tokenHeader(h.mint(c.conv)), c.body)
		readAll(t, resp.Body)
		if resp.StatusCode != c.status {
			t.Fatalf("%s/%s: status %d, want %d", c.conv.Tenant, c.conv.ID, resp.StatusCode, c.status)
		}
		h.waitServed(t)
	}
	reqs, _, _, _, _ := m.snapshot()
	want := []RequestInfo{{Status: 403}, {Status: 403}, {Tenant: "acme", Env: "prod", Status: 400}}
	if diff := cmp.Diff(want, reqs); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}
