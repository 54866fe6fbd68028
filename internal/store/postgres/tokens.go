package postgres

import (
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/talkide/platform/internal/store"
)

// AddIdentityToken implements store.Store.
func (s *Store) AddIdentityToken(ctx context.Context, t store.IdentityToken) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO identity_tokens
		(id, tenant, env, hash, created_at, expires_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		t.ID, t.Tenant, t.Env, hex.EncodeToString(t.Hash[:]),
		millis(t.CreatedAt), millis(t.ExpiresAt), nullMillis(t.RevokedAt))
	if err != nil {
		return fmt.Errorf("postgres: add identity token %s for %s/%s: %w", t.ID, t.Tenant, t.Env, constraint(err))
	}
	return nil
}

// GetIdentityToken implements store.Store.
func (s *Store) GetIdentityToken(ctx context.Context, id string) (store.IdentityToken, error) {
	var (
		t                store.IdentityToken
		hash             string
		created, expires int64
		revoked          *int64
	)
	err := s.pool.QueryRow(ctx, `SELECT id, tenant, env, hash, created_at, expires_at, revoked_at
		FROM identity_tokens WHERE id = $1`, id).
		Scan(&t.ID, &t.Tenant, &t.Env, &hash, &created, &expires, &revoked)
	if err != nil {
		return store.IdentityToken{}, fmt.Errorf("postgres: get identity token %s: %w", id, notFound(err))
	}
	if len(hash) != hex.EncodedLen(len(t.Hash)) {
		return store.IdentityToken{}, fmt.Errorf("postgres: get identity token %s: stored hash has %d hex digits", id, len(hash))
	}
	if _, err := hex.Decode(t.Hash[:], []byte(hash)); err != nil {
		return store.IdentityToken{}, fmt.Errorf("postgres: get identity token %s: stored hash: %w", id, err)
	}
	t.CreatedAt = fromMillis(created)
	t.ExpiresAt = fromMillis(expires)
	t.RevokedAt = fromNullMillis(revoked)
	return t, nil
}

// RevokeIdentityToken implements store.Store.
func (s *Store) RevokeIdentityToken(ctx context.Context, id string, at time.Time) error {
	if at.IsZero() {
		return fmt.Errorf("postgres: revoke identity token %s: zero time", id)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE identity_tokens SET revoked_at = COALESCE(revoked_at, $1)
		WHERE id = $2`, millis(at), id)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("postgres: revoke identity token %s: %w", id, err)
	}
	return nil
}
