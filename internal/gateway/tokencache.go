package gateway

import (
	"sync"
	"time"

	"github.com/talkide/platform/internal/trust"
)

// maxCachedTokens bounds the token cache. A worker holds one token per
// conversation at a time (minted again after a minute), so this is room
// for thousands of conversations calling at once; when it is full, expired
// entries go first, then an arbitrary one.
const maxCachedTokens = 16384

// tokenCache remembers the WorkerTokens that verified, with their claims,
// until they expire: a conversation's calls reuse one token for a minute or
// more, and verifying it again each time (HMAC-SHA256, two base64 decodes,
// the claims' JSON) was a tenth of the gateway's allocations per call.
//
// What a hit skips is only what cannot change: the token's form, its
// signature and its claims, which the keyring (immutable once built)
// decided when the token first verified. The clock is not skipped: a hit
// checks expiry and issue time against now, as VerifyWorkerToken does, so
// a cached token expires on the second it would otherwise. A token that
// fails to verify is never remembered, so a forged or tampered token
// always takes the whole check (and a lookup costs a forger nothing he
// could learn from: the map compares whole strings only after the
// randomly seeded hashes match).
//
// A nil *tokenCache caches nothing.
type tokenCache struct {
	mu sync.Mutex
	m  map[string]trust.WorkerClaims // guarded by mu; by the whole token
}

func newTokenCache() *tokenCache {
	return &tokenCache{m: make(map[string]trust.WorkerClaims)}
}

// verify returns the claims of token as keys.VerifyWorkerToken would at
// now, from the cache when the token verified before.
func (c *tokenCache) verify(keys *trust.Keyring, token string, now time.Time) (trust.WorkerClaims, error) {
	if c == nil {
		return keys.VerifyWorkerToken(token, now)
	}
	c.mu.Lock()
	claims, ok := c.m[token]
	c.mu.Unlock()
	if ok {
		if err := claimsTimely(claims, now); err != nil {
			return trust.WorkerClaims{}, err
		}
		return claims, nil
	}
	claims, err := keys.VerifyWorkerToken(token, now)
	if err != nil {
		return claims, err
	}
	c.put(token, claims, now)
	return claims, nil
}

// claimsTimely repeats VerifyWorkerToken's checks of the clock: a token
// has not expired and was not issued beyond the clock skew in the future.
func claimsTimely(c trust.WorkerClaims, now time.Time) error {
	if now.Unix() >= c.ExpiresAt || c.IssuedAt > now.Add(trust.MaxClockSkew).Unix() {
		return trust.ErrExpired
	}
	return nil
}

func (c *tokenCache) put(token string, claims trust.WorkerClaims, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCachedTokens {
		unix := now.Unix()
		for t, cl := range c.m {
			if unix >= cl.ExpiresAt {
				delete(c.m, t)
			}
		}
		if len(c.m) >= maxCachedTokens {
			for t := range c.m { // map order is arbitrary: evict one entry
				delete(c.m, t)
				break
			}
		}
	}
	c.m[token] = claims
}

// len returns how many tokens are remembered (tests).
func (c *tokenCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
