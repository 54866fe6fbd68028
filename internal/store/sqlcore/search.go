package sqlcore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/talkide/platform/internal/store"
)

// The conversation search: conversation_texts holds each text once per
// (conversation, key); the dialect indexes it (SQLite: an FTS5 table kept
// by the statements of Dialect.Search; PostgreSQL: a GIN expression index
// kept by the database itself) and finds the rows that match.

const (
	insertText = `INSERT INTO conversation_texts (conversation_id, key, kind, body, at) VALUES ($1, $2, $3, $4, $5)
	ON CONFLICT (conversation_id, key) DO NOTHING`
	deleteText = `DELETE FROM conversation_texts WHERE conversation_id = $1 AND key = $2`
)

// titleKey is the key of a conversation's title among its texts.
const titleKey = "title"

// Search is what differs between the databases in the conversation
// search.
type Search struct {
	// Index, when set, runs after a text is inserted, with its
	// conversation id ($1) and key ($2), to index it.
	Index string
	// Unindex, when set, runs before a text is deleted, with its
	// conversation id ($1) and key ($2).
	Unindex string
	// Hits is a query of the texts of user $1's conversations that match
	// $2, the Match of the search's terms, with the columns
	// conversation_id, kind, body, score (higher is better) and n, the
	// text's rank within its conversation from 1 (best score first, then
	// the latest).
	Hits string
	// Match writes terms (store.SearchTerms: letters, digits and marks
	// only, at least one) as the database's query: every term, the last
	// one as a prefix.
	Match func(terms []string) string
}

// searchConversations: the best text of each conversation, best first,
// then by activity; $3 is the limit.
func searchConversations(d Dialect) string {
	cols := "c." + strings.ReplaceAll(conversationColumns, ", ", ", c.")
	return `SELECT ` + cols + `, h.kind, h.body, h.score FROM (` + d.Search.Hits + `) h
	JOIN conversations c ON c.id = h.conversation_id
	WHERE h.n = 1
	ORDER BY h.score DESC, c.last_activity_at DESC, c.id` + d.ByBytes + ` DESC
	LIMIT $3`
}

func scanHit(r Row) (store.SearchHit, error) {
	var (
		h                 store.SearchHit
		created, activity int64
		archived          *int64
	)
	c := &h.Conversation
	if err := r.Scan(&c.ID, &c.Tenant, &c.Env, &c.UserID, &c.Title, &created, &activity, &archived, &h.Kind, &h.Body, &h.Score); err != nil {
		return store.SearchHit{}, err
	}
	c.CreatedAt = FromMillis(created)
	c.LastActivityAt = FromMillis(activity)
	c.ArchivedAt = fromNullMillis(archived)
	return h, nil
}

// addText inserts a text and indexes it; added is false when its key was
// taken.
func (t *Tables) addText(ctx context.Context, tx Tx, x store.ConversationText) (added bool, err error) {
	n, err := tx.Exec(ctx, insertText, x.ConversationID, x.Key, x.Kind, x.Body, Millis(x.At))
	if err != nil || n == 0 {
		return false, err
	}
	if t.d.Search.Index != "" {
		if _, err := tx.Exec(ctx, t.d.Search.Index, x.ConversationID, x.Key); err != nil {
			return false, err
		}
	}
	return true, nil
}

// putTitle makes title the conversation's title text, in place of the one
// before.
func (t *Tables) putTitle(ctx context.Context, tx Tx, id, title string, at time.Time) error {
	if t.d.Search.Unindex != "" {
		if _, err := tx.Exec(ctx, t.d.Search.Unindex, id, titleKey); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, deleteText, id, titleKey); err != nil {
		return err
	}
	_, err := t.addText(ctx, tx, store.ConversationText{ConversationID: id, Key: titleKey, Kind: store.TextTitle, Body: title, At: at})
	return err
}

// AddConversationText implements store.Store.
func (t *Tables) AddConversationText(ctx context.Context, x store.ConversationText) (bool, error) {
	var added bool
	err := t.db.InTx(ctx, func(tx Tx) error {
		var err error
		added, err = t.addText(ctx, tx, x)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("%s: add text %s of conversation %s: %w", t.name, x.Key, x.ConversationID, err)
	}
	return added, nil
}

// SearchConversations implements store.Store.
func (t *Tables) SearchConversations(ctx context.Context, userID, query string, limit int) ([]store.SearchHit, error) {
	terms := store.SearchTerms(query)
	if len(terms) == 0 {
		return nil, nil
	}
	hs, err := collect(ctx, t.db, scanHit, t.searchConversations, userID, t.d.Search.Match(terms), max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("%s: search conversations of %s: %w", t.name, userID, err)
	}
	return hs, nil
}
