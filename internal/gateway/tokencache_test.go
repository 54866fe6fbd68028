package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/trust"
)

func testKeyring(t testing.TB) *trust.Keyring {
	t.Helper()
	keys, err := trust.NewKeyring("k1", map[string][]byte{"k1": bytes.Repeat([]byte{3}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestTokenCache checks that a cached token gets the answer the keyring
// would give at every instant: the same claims while it lives, ErrExpired
// from the second it expires, and that what fails to verify is never
// remembered.
func TestTokenCache(t *testing.T) {
	keys := testKeyring(t)
	c := newTokenCache()
	t0 := time.Unix(1_800_000_000, 0)
	tok, want := keys.MintWorkerToken("acme", "prod", "conv-1", t0)

	for i := range 2 {
		got, err := c.verify(keys, tok, t0.Add(time.Second))
		if err != nil || got != want {
			t.Fatalf("verify %d: %+v, %v; want %+v", i, got, err, want)
		}
	}
	if n := c.len(); n != 1 {
		t.Fatalf("%d tokens cached, want 1", n)
	}

	// The clock is checked on every hit, exactly as the keyring checks it.
	for _, at := range []time.Time{
		time.Unix(want.ExpiresAt-1, 0),
		time.Unix(want.ExpiresAt, 0),
		time.Unix(want.ExpiresAt+3600, 0),
		time.Unix(want.IssuedAt, 0).Add(-trust.MaxClockSkew),
		time.Unix(want.IssuedAt, 0).Add(-trust.MaxClockSkew - time.Second),
	} {
		_, cachedErr := c.verify(keys, tok, at)
		_, keyErr := keys.VerifyWorkerToken(tok, at)
		if (cachedErr == nil) != (keyErr == nil) || !errors.Is(cachedErr, keyErr) {
			t.Errorf("at %v: cached %v, keyring %v", at.Unix()-want.IssuedAt, cachedErr, keyErr)
		}
	}
	if _, err := c.verify(keys, tok, time.Unix(want.ExpiresAt, 0)); !errors.Is(err, trust.ErrExpired) {
		t.Errorf("at expiry: %v, want ErrExpired", err)
	}

	// A tampered copy of a cached token is checked in full and refused,
	// and neither it nor any other failure is remembered.
	bad := []string{
		flip(tok, len(tok)-2),                // signature
		flip(tok, strings.Index(tok, ".")+5), // key id or payload
		tok + "A",
		tok[:len(tok)-1],
		"wt1.k1.e30.AAAA",
	}
	expiredTok, _ := keys.MintWorkerToken("acme", "prod", "conv-2", t0.Add(-time.Hour))
	future, _ := keys.MintWorkerToken("acme", "prod", "conv-3", t0.Add(time.Hour))
	for _, b := range append(bad, expiredTok, future) {
		for range 2 {
			if _, err := c.verify(keys, b, t0.Add(time.Second)); err == nil {
				t.Errorf("token %q verified", b)
			}
		}
	}
	if n := c.len(); n != 1 {
		t.Errorf("%d tokens cached after failures, want 1", n)
	}

	var nilCache *tokenCache
	if got, err := nilCache.verify(keys, tok, t0); err != nil || got != want {
		t.Errorf("nil cache: %+v, %v", got, err)
	}
}

// TestTokenCacheBound checks that the cache never holds more than
// maxCachedTokens, and that a full cache drops expired tokens first.
func TestTokenCacheBound(t *testing.T) {
	keys := testKeyring(t)
	c := newTokenCache()
	t0 := time.Unix(1_800_000_000, 0)
	old, _ := keys.MintWorkerToken("acme", "prod", "conv-old", t0)
	if _, err := c.verify(keys, old, t0); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(trust.WorkerTokenTTL) // old has expired by then
	var last string
	for i := range maxCachedTokens + 10 {
		tok, _ := keys.MintWorkerToken("acme", "prod", fmt.Sprintf("conv-%d", i), later)
		if _, err := c.verify(keys, tok, later); err != nil {
			t.Fatal(err)
		}
		last = tok
	}
	if n := c.len(); n > maxCachedTokens {
		t.Errorf("%d tokens cached, bound %d", n, maxCachedTokens)
	}
	c.mu.Lock()
	_, oldKept := c.m[old]
	_, lastKept := c.m[last]
	c.mu.Unlock()
	if oldKept {
		t.Error("an expired token survived a full cache")
	}
	if !lastKept {
		t.Error("the newest token is not cached")
	}
}

// TestTokenCacheExpiresThroughGateway checks the answer a client gets for
// a token that was cached and has since expired: 401, "expired".
func TestTokenCacheExpiresThroughGateway(t *testing.T) {
	h := newCacheHarness(t, 0)
	tok, claims := h.keys.MintWorkerToken(convA.Tenant, convA.Env, convA.ID, time.Now())
	send := func() (int, string) {
		resp := postMessages(t, h.url, tok)
		defer resp.Body.Close()
		return resp.StatusCode, readAll(t, resp.Body)
	}
	for i := range 2 {
		if st, body := send(); st != 200 {
			t.Fatalf("call %d: %d %s", i, st, body)
		}
	}
	h.skew.Store(int64(time.Until(time.Unix(claims.ExpiresAt, 0)) + time.Second))
	st, body := send()
	if st != http.StatusUnauthorized || !strings.Contains(body, "worker token expired") {
		t.Errorf("expired cached token: %d %s", st, body)
	}
}
