package sqlcore

import (
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/talkide/platform/internal/store"
)

// Identity tokens: only their hash, as lowercase hex.

const tokenColumns = `id, tenant, env, hash, created_at, expires_at, revoked_at`

const (
	insertToken = `INSERT INTO identity_tokens (` + tokenColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7)`

	getToken = `SELECT ` + tokenColumns + ` FROM identity_tokens WHERE id = $1`

	// revokeToken keeps the earliest revocation time: revoking now ends a
	// grace period set earlier, and a later time never revives a token.
	revokeToken = `UPDATE identity_tokens SET revoked_at = CASE
	WHEN revoked_at IS NULL OR revoked_at > $1 THEN $1 ELSE revoked_at END WHERE id = $2`

	listTokens = `SELECT ` + tokenColumns + ` FROM identity_tokens WHERE tenant = $1 AND env = $2 ORDER BY created_at, id`
)

func tokenArgs(t store.IdentityToken) []any {
	return []any{t.ID, t.Tenant, t.Env, hex.EncodeToString(t.Hash[:]),
		Millis(t.CreatedAt), Millis(t.ExpiresAt), nullMillis(t.RevokedAt)}
}

func scanToken(r Row) (store.IdentityToken, error) {
	var (
		t                store.IdentityToken
		hash             string
		created, expires int64
		revoked          *int64
	)
	if err := r.Scan(&t.ID, &t.Tenant, &t.Env, &hash, &created, &expires, &revoked); err != nil {
		return store.IdentityToken{}, err
	}
	if len(hash) != hex.EncodedLen(len(t.Hash)) {
		return store.IdentityToken{}, fmt.Errorf("stored hash has %d hex digits", len(hash))
	}
	if _, err := hex.Decode(t.Hash[:], []byte(hash)); err != nil {
		return store.IdentityToken{}, fmt.Errorf("stored hash: %w", err)
	}
	t.CreatedAt = FromMillis(created)
	t.ExpiresAt = FromMillis(expires)
	t.RevokedAt = fromNullMillis(revoked)
	return t, nil
}

// AddIdentityToken implements store.Store.
func (t *Tables) AddIdentityToken(ctx context.Context, it store.IdentityToken) error {
	if _, err := t.db.Exec(ctx, insertToken, tokenArgs(it)...); err != nil {
		return fmt.Errorf("%s: add identity token %s for %s/%s: %w", t.name, it.ID, it.Tenant, it.Env, t.constraint(err))
	}
	return nil
}

// GetIdentityToken implements store.Store.
func (t *Tables) GetIdentityToken(ctx context.Context, id string) (store.IdentityToken, error) {
	return getByID(ctx, t, scanToken, getToken, "identity token", id)
}

// RevokeIdentityToken implements store.Store.
func (t *Tables) RevokeIdentityToken(ctx context.Context, id string, at time.Time) error {
	return t.revoke(ctx, revokeToken, "identity token", id, at)
}

// revoke runs query, which sets the revocation time of the token id (of
// kind what) to at: store.ErrNotFound when there is no such token.
func (t *Tables) revoke(ctx context.Context, query, what, id string, at time.Time) error {
	if at.IsZero() {
		return fmt.Errorf("%s: revoke %s %s: zero time", t.name, what, id)
	}
	n, err := t.db.Exec(ctx, query, Millis(at), id)
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("%s: revoke %s %s: %w", t.name, what, id, err)
	}
	return nil
}

// ListIdentityTokens implements store.Store.
func (t *Tables) ListIdentityTokens(ctx context.Context, tenant, env string) ([]store.IdentityToken, error) {
	ts, err := collect(ctx, t.db, scanToken, listTokens, tenant, env)
	if err != nil {
		return nil, fmt.Errorf("%s: list identity tokens of %s/%s: %w", t.name, tenant, env, err)
	}
	return ts, nil
}
