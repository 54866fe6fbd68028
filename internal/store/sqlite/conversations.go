package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/talkide/platform/internal/store"
)

const conversationColumns = `id, tenant, env, user_id, title, created_at`

// insertConversation stores a conversation unless its ID is taken.
const insertConversation = `INSERT INTO conversations (` + conversationColumns + `) VALUES (?, ?, ?, ?, ?, ?)
	ON CONFLICT (id) DO NOTHING`

// CreateConversation implements store.Store.
func (s *Store) CreateConversation(ctx context.Context, c store.Conversation) (store.Conversation, bool, error) {
	var (
		stored  store.Conversation
		created bool
	)
	err := s.tx(ctx, func(tx *sql.Tx) error {
		ins, err := s.txStmt(ctx, tx, insertConversation)
		if err != nil {
			return err
		}
		res, err := ins.ExecContext(ctx, c.ID, c.Tenant, c.Env, c.UserID, c.Title, millis(c.CreatedAt))
		if err != nil {
			return constraint(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			stored, created = c, true
			stored.CreatedAt = fromMillis(millis(c.CreatedAt))
			return nil
		}
		stored, err = scanConversation(tx.QueryRowContext(ctx, getConversation, c.ID))
		if err != nil {
			return err
		}
		if stored.UserID != c.UserID || stored.Tenant != c.Tenant || stored.Env != c.Env {
			return fmt.Errorf("%w: it belongs to another user or tenant-env", store.ErrConflict)
		}
		return nil
	})
	if err != nil {
		return store.Conversation{}, false, fmt.Errorf("sqlite: create conversation %s: %w", c.ID, err)
	}
	return stored, created, nil
}

// getConversation reads one conversation by its ID.
const getConversation = `SELECT ` + conversationColumns + ` FROM conversations WHERE id = ?`

// GetConversation implements store.Store. The gateway looks a conversation
// up on its first model call (then caches it), the control plane on most
// requests about one, so its query is prepared once.
func (s *Store) GetConversation(ctx context.Context, id string) (store.Conversation, error) {
	st, err := s.readStmt(ctx, getConversation)
	if err != nil {
		return store.Conversation{}, fmt.Errorf("sqlite: get conversation %s: %w", id, err)
	}
	c, err := scanConversation(st.QueryRowContext(ctx, id))
	if err != nil {
		return store.Conversation{}, fmt.Errorf("sqlite: get conversation %s: %w", id, notFound(err))
	}
	return c, nil
}

// ListConversations implements store.Store.
func (s *Store) ListConversations(ctx context.Context, userID string) ([]store.Conversation, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+conversationColumns+` FROM conversations
		WHERE user_id = ? ORDER BY created_at DESC, id DESC`, userID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list conversations of %s: %w", userID, err)
	}
	cs, err := collect(rows, scanConversation)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list conversations of %s: %w", userID, err)
	}
	return cs, nil
}

func scanConversation(r scanner) (store.Conversation, error) {
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
