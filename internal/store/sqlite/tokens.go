package sqlite

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/talkide/platform/internal/store"
)

// AddIdentityToken implements store.Store.
func (s *Store) AddIdentityToken(ctx context.Context, t store.IdentityToken) error {
	_, err := s.writer.ExecContext(ctx, `INSERT INTO identity_tokens
		(id, tenant, env, hash, created_at, expires_at, revoked_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		t.ID, t.Tenant, t.Env, hex.EncodeToString(t.Hash[:]),
		millis(t.CreatedAt), millis(t.ExpiresAt), nullMillis(t.RevokedAt))
	if err != nil {
		return fmt.Errorf("sqlite: add identity token %s for %s/%s: %w", t.ID, t.Tenant, t.Env, constraint(err))
	}
	return nil
}

// GetIdentityToken implements store.Store.
func (s *Store) GetIdentityToken(ctx context.Context, id string) (store.IdentityToken, error) {
	var (
		t                store.IdentityToken
		hash             string
		created, expires int64
		revoked          sql.NullInt64
	)
	err := s.reader.QueryRowContext(ctx, `SELECT id, tenant, env, hash, created_at, expires_at, revoked_at
		FROM identity_tokens WHERE id = ?`, id).
		Scan(&t.ID, &t.Tenant, &t.Env, &hash, &created, &expires, &revoked)
	if err != nil {
		return store.IdentityToken{}, fmt.Errorf("sqlite: get identity token %s: %w", id, notFound(err))
	}
	if len(hash) != hex.EncodedLen(len(t.Hash)) {
		return store.IdentityToken{}, fmt.Errorf("sqlite: get identity token %s: stored hash has %d hex digits", id, len(hash))
	}
	if _, err := hex.Decode(t.Hash[:], []byte(hash)); err != nil {
		return store.IdentityToken{}, fmt.Errorf("sqlite: get identity token %s: stored hash: %w", id, err)
	}
	t.CreatedAt = fromMillis(created)
	t.ExpiresAt = fromMillis(expires)
	t.RevokedAt = fromNullMillis(revoked)
	return t, nil
}

// RevokeIdentityToken implements store.Store.
func (s *Store) RevokeIdentityToken(ctx context.Context, id string, at time.Time) error {
	if at.IsZero() {
		return fmt.Errorf("sqlite: revoke identity token %s: zero time", id)
	}
	res, err := s.writer.ExecContext(ctx, `UPDATE identity_tokens SET revoked_at = COALESCE(revoked_at, ?)
		WHERE id = ?`, millis(at), id)
	if err == nil {
		err = oneRow(res)
	}
	if err != nil {
		return fmt.Errorf("sqlite: revoke identity token %s: %w", id, err)
	}
	return nil
}

// oneRow returns store.ErrNotFound unless res affected a row.
func oneRow(res sql.Result) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return nil
}
