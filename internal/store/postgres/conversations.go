package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/talkide/platform/internal/store"
)

const conversationColumns = `id, tenant, env, user_id, title, created_at`

// CreateConversation implements store.Store.
func (s *Store) CreateConversation(ctx context.Context, c store.Conversation) (store.Conversation, bool, error) {
	var (
		stored  store.Conversation
		created bool
	)
	err := s.tx(ctx, func(tx pgx.Tx) error {
		// A concurrent insert of the same id makes this one wait for that
		// transaction and then do nothing; the SELECT that follows, with a
		// snapshot of its own (READ COMMITTED), sees the winner's row.
		tag, err := tx.Exec(ctx, `INSERT INTO conversations (`+conversationColumns+`) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (id) DO NOTHING`, c.ID, c.Tenant, c.Env, c.UserID, c.Title, millis(c.CreatedAt))
		if err != nil {
			return constraint(err)
		}
		if tag.RowsAffected() == 1 {
			stored, created = c, true
			stored.CreatedAt = fromMillis(millis(c.CreatedAt))
			return nil
		}
		stored, err = scanConversation(tx.QueryRow(ctx, `SELECT `+conversationColumns+` FROM conversations
			WHERE id = $1`, c.ID))
		if err != nil {
			return err
		}
		if stored.UserID != c.UserID || stored.Tenant != c.Tenant || stored.Env != c.Env {
			return fmt.Errorf("%w: it belongs to another user or tenant-env", store.ErrConflict)
		}
		return nil
	})
	if err != nil {
		return store.Conversation{}, false, fmt.Errorf("postgres: create conversation %s: %w", c.ID, err)
	}
	return stored, created, nil
}

// GetConversation implements store.Store.
func (s *Store) GetConversation(ctx context.Context, id string) (store.Conversation, error) {
	c, err := scanConversation(s.pool.QueryRow(ctx, `SELECT `+conversationColumns+` FROM conversations
		WHERE id = $1`, id))
	if err != nil {
		return store.Conversation{}, fmt.Errorf("postgres: get conversation %s: %w", id, notFound(err))
	}
	return c, nil
}

// ListConversations implements store.Store, ids compared by bytes.
func (s *Store) ListConversations(ctx context.Context, userID string) ([]store.Conversation, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+conversationColumns+` FROM conversations
		WHERE user_id = $1 ORDER BY created_at DESC, id COLLATE "C" DESC`, userID)
	if err != nil {
		return nil, fmt.Errorf("postgres: list conversations of %s: %w", userID, err)
	}
	cs, err := collect(rows, scanConversation)
	if err != nil {
		return nil, fmt.Errorf("postgres: list conversations of %s: %w", userID, err)
	}
	return cs, nil
}

func scanConversation(r pgx.Row) (store.Conversation, error) {
	var (
		c       store.Conversation
		created int64
	)
	if err := r.Scan(&c.ID, &c.Tenant, &c.Env, &c.UserID, &c.Title, &created); err != nil {
		return store.Conversation{}, err
	}
	c.CreatedAt = fromMillis(created)
	return c, nil
}
