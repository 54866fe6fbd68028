package postgres

import (
	"context"
	"fmt"

	"github.com/talkide/platform/internal/store"
)

// PutUser implements store.Store.
func (s *Store) PutUser(ctx context.Context, u store.User) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO users (id, name, created_at) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO NOTHING`, u.ID, u.Name, millis(u.CreatedAt))
	if err != nil {
		return fmt.Errorf("postgres: put user %s: %w", u.ID, err)
	}
	return nil
}

// GetUser implements store.Store.
func (s *Store) GetUser(ctx context.Context, id string) (store.User, error) {
	var (
		u       store.User
		created int64
	)
	err := s.pool.QueryRow(ctx, `SELECT id, name, created_at FROM users WHERE id = $1`, id).
		Scan(&u.ID, &u.Name, &created)
	if err != nil {
		return store.User{}, fmt.Errorf("postgres: get user %s: %w", id, notFound(err))
	}
	u.CreatedAt = fromMillis(created)
	return u, nil
}
