package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/trust"
)

// countingStore counts the conversation lookups that reach the store.
type countingStore struct {
	*fakeStore
	gets atomic.Int64
}

func (s *countingStore) GetConversation(ctx context.Context, id string) (store.Conversation, error) {
	s.gets.Add(1)
	return s.fakeStore.GetConversation(ctx, id)
}

// cacheHarness is a gateway on a counting store with a clock the test
// moves.
type cacheHarness struct {
	keys  *trust.Keyring
	store *countingStore
	url   string
	// skew is added to time.Now, in nanoseconds. Not a fakeclock.Clock: the
	// gateway checks WorkerTokens minted at real time and its transport's
	// deadlines run in real time; only the cache's TTL is jumped over.
	skew atomic.Int64
}

func newCacheHarness(t *testing.T, ttl time.Duration) *cacheHarness {
	t.Helper()
	up := httptest.NewServer(fakeAnthropic())
	t.Cleanup(up.Close)
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := trust.NewKeyring("k1", map[string][]byte{"k1": bytes.Repeat([]byte{1}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	h := &cacheHarness{keys: keys, store: &countingStore{fakeStore: newFakeStore(convA, convB, convC)}}
	now := func() time.Time { return time.Now().Add(time.Duration(h.skew.Load())) }
	gw := New(u, testAPIKey, keys, h.store, &Options{Now: now, ConversationTTL: ttl})
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	h.url = srv.URL + Prefix
	return h
}

// call sends a request for conversation id with a token minted for tenant
// and env, and returns the status.
func (h *cacheHarness) call(t *testing.T, tenant, env, id string) int {
	t.Helper()
	tok, _ := h.keys.MintWorkerToken(tenant, env, id, time.Now())
	resp := postMessages(t, h.url, tok)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// postMessages sends requestBody to the gateway at url with the worker
// token tok.
func postMessages(t *testing.T, url, tok string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/messages", strings.NewReader(requestBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(TokenHeader, tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestConversationCache(t *testing.T) {
	h := newCacheHarness(t, 0) // DefaultConversationTTL
	type step struct {
		name              string
		do                func() // before the call
		tenant, env, conv string
		status            int
		wantGets          int64 // store lookups so far
	}
	steps := []step{
		{name: "first call looks up", tenant: "acme", env: "prod", conv: convA.ID, status: 200, wantGets: 1},
		{name: "second call is cached", tenant: "acme", env: "prod", conv: convA.ID, status: 200, wantGets: 1},
		{name: "cached conversation, token of another tenant-env", tenant: "globex", env: "dev", conv: convA.ID, status: 403, wantGets: 1},
		{name: "just before the TTL", do: func() { h.skew.Store(int64(DefaultConversationTTL - time.Second)) },
			tenant: "acme", env: "prod", conv: convA.ID, status: 200, wantGets: 1},
		{name: "at the TTL it is looked up again", do: func() { h.skew.Store(int64(DefaultConversationTTL)) },
			tenant: "acme", env: "prod", conv: convA.ID, status: 200, wantGets: 2},
		{name: "unknown conversation", tenant: "acme", env: "prod", conv: "conv-new", status: 403, wantGets: 3},
		{name: "not found is not cached", do: func() {
			h.store.mu.Lock()
			h.store.convs["conv-new"] = store.Conversation{ID: "conv-new", Tenant: "acme", Env: "prod", UserID: "user-9"}
			h.store.mu.Unlock()
		}, tenant: "acme", env: "prod", conv: "conv-new", status: 200, wantGets: 4},
		{name: "store failure", do: func() {
			h.store.mu.Lock()
			h.store.getErr = fmt.Errorf("database is locked")
			h.store.mu.Unlock()
		}, tenant: "acme", env: "prod", conv: convB.ID, status: 500, wantGets: 5},
		{name: "a failure is not cached", do: func() {
			h.store.mu.Lock()
			h.store.getErr = nil
			h.store.mu.Unlock()
		}, tenant: "acme", env: "prod", conv: convB.ID, status: 200, wantGets: 6},
		{name: "a cached conversation does not need the store", do: func() {
			h.store.mu.Lock()
			h.store.getErr = fmt.Errorf("database is locked")
			h.store.mu.Unlock()
		}, tenant: "acme", env: "prod", conv: convB.ID, status: 200, wantGets: 6},
	}
	for _, s := range steps {
		if s.do != nil {
			s.do()
		}
		if got := h.call(t, s.tenant, s.env, s.conv); got != s.status {
			t.Errorf("%s: status %d, want %d", s.name, got, s.status)
		}
		if got := h.store.gets.Load(); got != s.wantGets {
			t.Errorf("%s: %d store lookups, want %d", s.name, got, s.wantGets)
		}
	}
}

func TestConversationCacheOff(t *testing.T) {
	h := newCacheHarness(t, -1)
	for i := range 3 {
		if got := h.call(t, "acme", "prod", convA.ID); got != 200 {
			t.Fatalf("call %d: status %d", i, got)
		}
	}
	if got := h.store.gets.Load(); got != 3 {
		t.Errorf("%d store lookups for 3 calls without a cache, want 3", got)
	}
}

func TestConversationCacheBounded(t *testing.T) {
	c := newConvCache(time.Minute)
	now := time.Now()
	for i := range maxCachedConversations + 10 {
		c.put(store.Conversation{ID: fmt.Sprintf("conv-%d", i)}, now)
	}
	if n := len(c.m); n != maxCachedConversations {
		t.Errorf("%d entries, want the bound %d", n, maxCachedConversations)
	}
	last := fmt.Sprintf("conv-%d", maxCachedConversations+9)
	if _, ok := c.get(last, now); !ok {
		t.Errorf("the entry put last is not cached")
	}
	if _, ok := c.get(last, now.Add(time.Minute)); ok {
		t.Errorf("an entry is still returned at its TTL")
	}
}
