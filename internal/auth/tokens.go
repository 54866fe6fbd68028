package auth

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/tokenscheme"
)

// apiTokens are a user's API tokens, "tka_<id>.<secret>"; the store keeps
// the id and the secret's SHA-256.
var apiTokens = tokenscheme.New("tka_", "API token")

// DefaultAPITokenTTL is an API token's lifetime when none is given.
const DefaultAPITokenTTL = 90 * 24 * time.Hour

// MaxAPITokenName bounds a token's name.
const MaxAPITokenName = 64

// IssueAPIToken issues an API token for an existing user, valid from now
// for ttl (DefaultAPITokenTTL when 0), and stores its hash. The token is
// returned once, here.
func IssueAPIToken(ctx context.Context, st store.Store, userID, name string, ttl time.Duration, now time.Time) (token string, rec store.APIToken, err error) {
	if err := contract.ValidateID("user", userID); err != nil {
		return "", rec, err
	}
	if name != "" {
		if name, err = contract.ValidateLine("name", name, MaxAPITokenName); err != nil {
			return "", rec, err
		}
	}
	if ttl == 0 {
		ttl = DefaultAPITokenTTL
	}
	if ttl < 0 {
		return "", rec, fmt.Errorf("auth: token lifetime %s is negative", ttl)
	}
	if _, err := st.GetUser(ctx, userID); err != nil {
		return "", rec, fmt.Errorf("auth: user %s: %w", userID, err)
	}
	now = now.UTC()
	tok := apiTokens.Issue()
	rec = store.APIToken{ID: tok.ID, UserID: userID, Name: name, Hash: tok.Hash, CreatedAt: now, ExpiresAt: now.Add(ttl)}
	if err := st.AddAPIToken(ctx, rec); err != nil {
		return "", store.APIToken{}, fmt.Errorf("auth: %w", err)
	}
	if stored, err := st.GetAPIToken(ctx, tok.ID); err == nil {
		rec = stored
	}
	return tok.Token, rec, nil
}

// RevokeAPIToken revokes the token with id at now and returns its record.
func RevokeAPIToken(ctx context.Context, st store.Store, id string, now time.Time) (store.APIToken, error) {
	if !tokenscheme.ValidID(id) {
		// Not echoed: a whole token pasted by mistake must not reach a log.
		return store.APIToken{}, fmt.Errorf("auth: not a token id (want the id alone, as talkide admin api-token list shows it): %w", store.ErrNotFound)
	}
	if err := st.RevokeAPIToken(ctx, id, now.UTC()); err != nil {
		return store.APIToken{}, fmt.Errorf("auth: revoke API token %s: %w", id, err)
	}
	return st.GetAPIToken(ctx, id)
}

// apiToken checks a presented token: its hash must match (constant-time)
// and at now it must be neither revoked nor expired. A valid use is
// recorded as the token's last use.
func (a *Authenticator) apiToken(ctx context.Context, token string, now time.Time) (store.APIToken, error) {
	rec, err := tokenscheme.Verify(apiTokens, token, now, func(id string) (store.APIToken, tokenscheme.Stored, bool, error) {
		rec, err := a.st.GetAPIToken(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return rec, tokenscheme.Stored{}, false, nil
		}
		return rec, tokenscheme.Stored{Hash: rec.Hash, RevokedAt: rec.RevokedAt, ExpiresAt: rec.ExpiresAt}, err == nil, err
	})
	if errors.Is(err, tokenscheme.ErrInvalid) {
		return store.APIToken{}, unauthorized(err)
	}
	if err != nil {
		return store.APIToken{}, err
	}
	if now.Sub(rec.LastUsedAt) >= touchEvery {
		if err := a.st.TouchAPIToken(ctx, rec.ID, now); err != nil {
			a.log.Warn("recording an API token's use failed", "token", rec.ID, "err", err)
		}
	}
	return rec, nil
}
