package sqlcore

import (
	"context"
	"fmt"
	"time"

	"github.com/talkide/platform/internal/store"
)

// conversationColumns are read; a new conversation is inserted with the
// first seven (insertColumns) and is not archived.
const (
	conversationColumns = insertColumns + `, archived_at`
	insertColumns       = `id, tenant, env, user_id, title, created_at, last_activity_at`
)

const (
	// insertConversation stores a conversation unless its ID is taken.
	insertConversation = `INSERT INTO conversations (` + insertColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7)
	ON CONFLICT (id) DO NOTHING`

	// getConversation is on the gateway's path (its first model call of a
	// conversation) and the control plane's (most requests about one).
	getConversation = `SELECT ` + conversationColumns + ` FROM conversations WHERE id = $1`

	// setTitle and the archive statements change one field each;
	// archiving keeps the first time.
	setTitle  = `UPDATE conversations SET title = $2 WHERE id = $1`
	touch     = `UPDATE conversations SET last_activity_at = CASE WHEN last_activity_at < $2 THEN $2 ELSE last_activity_at END WHERE id = $1`
	archive   = `UPDATE conversations SET archived_at = COALESCE(archived_at, $2) WHERE id = $1`
	unarchive = `UPDATE conversations SET archived_at = NULL WHERE id = $1`
)

// byActivity orders conversations: the most recently active first, then by
// ID descending.
func byActivity(d Dialect) string {
	return ` ORDER BY last_activity_at DESC, id` + d.ByBytes + ` DESC`
}

// listConversations: by activity.
func listConversations(d Dialect) string {
	return `SELECT ` + conversationColumns + ` FROM conversations
	WHERE user_id = $1` + byActivity(d)
}

func conversationArgs(c store.Conversation) []any {
	return []any{c.ID, c.Tenant, c.Env, c.UserID, c.Title, Millis(c.CreatedAt), Millis(c.LastActivityAt)}
}

func scanConversation(r Row) (store.Conversation, error) {
	var (
		c                 store.Conversation
		created, activity int64
		archived          *int64
	)
	if err := r.Scan(&c.ID, &c.Tenant, &c.Env, &c.UserID, &c.Title, &created, &activity, &archived); err != nil {
		return store.Conversation{}, err
	}
	c.CreatedAt = FromMillis(created)
	c.LastActivityAt = FromMillis(activity)
	c.ArchivedAt = fromNullMillis(archived)
	return c, nil
}

// CreateConversation implements store.Store. A concurrent insert of the
// same ID makes this one wait for that transaction and then do nothing; the
// SELECT that follows sees the winner's row (see DB.InTx).
func (t *Tables) CreateConversation(ctx context.Context, c store.Conversation) (store.Conversation, bool, error) {
	var (
		stored  store.Conversation
		created bool
	)
	if c.LastActivityAt.IsZero() {
		c.LastActivityAt = c.CreatedAt
	}
	err := t.db.InTx(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, insertConversation, conversationArgs(c)...)
		if err != nil {
			return t.constraint(err)
		}
		if n == 1 {
			stored, created = c, true
			stored.CreatedAt = ms(c.CreatedAt)
			stored.LastActivityAt = ms(c.LastActivityAt)
			stored.ArchivedAt = time.Time{}
			if c.Title != "" {
				return t.putTitle(ctx, tx, c.ID, c.Title, c.CreatedAt)
			}
			return nil
		}
		stored, err = scanConversation(tx.QueryRow(ctx, getConversation, c.ID))
		if err != nil {
			return err
		}
		if stored.UserID != c.UserID || stored.Tenant != c.Tenant || stored.Env != c.Env {
			return fmt.Errorf("%w: it belongs to another user or tenant-env", store.ErrConflict)
		}
		return nil
	})
	if err != nil {
		return store.Conversation{}, false, fmt.Errorf("%s: create conversation %s: %w", t.name, c.ID, err)
	}
	return stored, created, nil
}

// GetConversation implements store.Store.
func (t *Tables) GetConversation(ctx context.Context, id string) (store.Conversation, error) {
	return getByID(ctx, t, scanConversation, getConversation, "conversation", id)
}

// ListConversations implements store.Store.
func (t *Tables) ListConversations(ctx context.Context, userID string) ([]store.Conversation, error) {
	cs, err := collect(ctx, t.db, scanConversation, t.listConversations, userID)
	if err != nil {
		return nil, fmt.Errorf("%s: list conversations of %s: %w", t.name, userID, err)
	}
	return cs, nil
}

// TouchConversation implements store.Store.
func (t *Tables) TouchConversation(ctx context.Context, id string, at time.Time) error {
	n, err := t.db.Exec(ctx, touch, id, Millis(at))
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("%s: touch conversation %s: %w", t.name, id, err)
	}
	return nil
}

// UpdateConversation implements store.Store: the changes and the read of
// the result in one transaction, so that what it returns is what it left.
func (t *Tables) UpdateConversation(ctx context.Context, id string, ch store.ConversationChange) (store.Conversation, error) {
	var c store.Conversation
	err := t.db.InTx(ctx, func(tx Tx) error {
		var err error
		if c, err = scanConversation(tx.QueryRow(ctx, getConversation+t.d.LockRow, id)); err != nil {
			return t.notFound(err)
		}
		if ch.Title != nil && (!ch.Untitled || c.Title == "") {
			if _, err := tx.Exec(ctx, setTitle, id, *ch.Title); err != nil {
				return err
			}
			if err := t.putTitle(ctx, tx, id, *ch.Title, ch.At); err != nil {
				return err
			}
		}
		if ch.Archived != nil {
			q, args := unarchive, []any{id}
			if *ch.Archived {
				q, args = archive, []any{id, Millis(ch.At)}
			}
			if _, err := tx.Exec(ctx, q, args...); err != nil {
				return err
			}
		}
		c, err = scanConversation(tx.QueryRow(ctx, getConversation, id))
		return err
	})
	if err != nil {
		return store.Conversation{}, fmt.Errorf("%s: update conversation %s: %w", t.name, id, err)
	}
	return c, nil
}
