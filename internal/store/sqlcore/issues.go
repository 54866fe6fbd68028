package sqlcore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/talkide/platform/internal/store"
)

// Issues and their comments. Labels are a JSON array; comments are ordered
// by seq, which counts from 1 within each issue.

const issueColumns = `id, tenant, env, idempotency_key, conversation_id, user_id, turn_id,
	title, body, severity, labels, status, created_at, updated_at`

const commentColumns = `id, issue_id, idempotency_key, turn_id, body, status, created_at`

const (
	// insertIssue stores an issue unless its tenant-env has one with its
	// idempotency key.
	insertIssue = `INSERT INTO issues (` + issueColumns + `)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
	ON CONFLICT (tenant, env, idempotency_key) DO NOTHING`

	getIssue = `SELECT ` + issueColumns + ` FROM issues WHERE id = $1`

	getIssueByKey = `SELECT ` + issueColumns + ` FROM issues
	WHERE tenant = $1 AND env = $2 AND idempotency_key = $3`

	getCommentByKey = `SELECT ` + commentColumns + ` FROM issue_comments
	WHERE issue_id = $1 AND idempotency_key = $2`

	// insertComment gives the comment the issue's next seq.
	insertComment = `INSERT INTO issue_comments (` + commentColumns + `, seq)
	VALUES ($1, $2, $3, $4, $5, $6, $7, (SELECT COALESCE(MAX(seq), 0) + 1 FROM issue_comments WHERE issue_id = $2))`

	// commentedIssue moves the issue's updated_at to the comment's time if
	// that is later, and sets its status when the comment sets one.
	commentedIssue = `UPDATE issues
	SET updated_at = CASE WHEN updated_at > $1 THEN updated_at ELSE $1 END,
		status = CASE WHEN $2 = '' THEN status ELSE $2 END
	WHERE id = $3`
)

// listIssues: of one conversation, of one status unless $2 is empty,
// newest first, then by ID descending, at most $3.
func listIssues(d Dialect) string {
	return `SELECT ` + issueColumns + ` FROM issues
	WHERE conversation_id = $1 AND ($2 = '' OR status = $2)
	ORDER BY created_at DESC, id` + d.ByBytes + ` DESC
	LIMIT $3`
}

// lockIssue finds an issue that is about to get a comment, and keeps
// other comments on it waiting until this one is added, so that the
// duplicate check and the next seq see every comment committed before.
func lockIssue(d Dialect) string {
	return `SELECT 1 FROM issues WHERE id = $1` + d.LockRow
}

func issueArgs(i store.Issue) ([]any, error) {
	labels := i.Labels
	if labels == nil {
		labels = []string{}
	}
	b, err := json.Marshal(labels)
	if err != nil {
		return nil, fmt.Errorf("labels: %w", err)
	}
	return []any{i.ID, i.Tenant, i.Env, i.IdempotencyKey, i.ConversationID, i.UserID, i.TurnID,
		i.Title, i.Body, i.Severity, string(b), i.Status, Millis(i.CreatedAt), Millis(i.UpdatedAt)}, nil
}

func scanIssue(r Row) (store.Issue, error) {
	var (
		i                store.Issue
		labels           string
		created, updated int64
	)
	if err := r.Scan(&i.ID, &i.Tenant, &i.Env, &i.IdempotencyKey, &i.ConversationID, &i.UserID, &i.TurnID,
		&i.Title, &i.Body, &i.Severity, &labels, &i.Status, &created, &updated); err != nil {
		return store.Issue{}, err
	}
	if err := json.Unmarshal([]byte(labels), &i.Labels); err != nil {
		return store.Issue{}, fmt.Errorf("issue %s: labels: %w", i.ID, err)
	}
	i.CreatedAt, i.UpdatedAt = FromMillis(created), FromMillis(updated)
	return i, nil
}

func commentArgs(c store.IssueComment) []any {
	return []any{c.ID, c.IssueID, c.IdempotencyKey, c.TurnID, c.Body, c.Status, Millis(c.CreatedAt)}
}

func scanComment(r Row) (store.IssueComment, error) {
	var (
		c       store.IssueComment
		created int64
	)
	if err := r.Scan(&c.ID, &c.IssueID, &c.IdempotencyKey, &c.TurnID, &c.Body, &c.Status, &created); err != nil {
		return store.IssueComment{}, err
	}
	c.CreatedAt = FromMillis(created)
	return c, nil
}

// CreateIssue implements store.Store. A concurrent insert of the same key
// makes this one wait for that transaction and then do nothing; the SELECT
// that follows sees the winner's row (see DB.InTx).
func (t *Tables) CreateIssue(ctx context.Context, i store.Issue) (store.Issue, bool, error) {
	args, err := issueArgs(i)
	if err != nil {
		return store.Issue{}, false, fmt.Errorf("%s: create issue %s: %w", t.name, i.ID, err)
	}
	var (
		stored  store.Issue
		created bool
	)
	err = t.db.InTx(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, insertIssue, args...)
		if err != nil {
			return t.constraint(err)
		}
		created = n == 1
		stored, err = scanIssue(tx.QueryRow(ctx, getIssueByKey, i.Tenant, i.Env, i.IdempotencyKey))
		if err != nil || created {
			return err
		}
		if stored.ConversationID != i.ConversationID {
			return fmt.Errorf("%w: idempotency key %q names an issue of another conversation", store.ErrConflict, i.IdempotencyKey)
		}
		cs, err := t.comments(ctx, tx, []string{stored.ID})
		stored.Comments = cs[stored.ID]
		return err
	})
	if err != nil {
		return store.Issue{}, false, fmt.Errorf("%s: create issue %s: %w", t.name, i.ID, err)
	}
	return stored, created, nil
}

// GetIssue implements store.Store.
func (t *Tables) GetIssue(ctx context.Context, id string) (store.Issue, error) {
	i, err := getByID(ctx, t, scanIssue, getIssue, "issue", id)
	if err != nil {
		return store.Issue{}, err
	}
	cs, err := t.comments(ctx, t.db, []string{id})
	if err != nil {
		return store.Issue{}, fmt.Errorf("%s: get issue %s: %w", t.name, id, err)
	}
	i.Comments = cs[id]
	return i, nil
}

// ListIssues implements store.Store.
func (t *Tables) ListIssues(ctx context.Context, conversationID, status string, limit int) ([]store.Issue, error) {
	lim := int64(math.MaxInt64) // no limit, in both databases' LIMIT
	if limit > 0 {
		lim = int64(limit)
	}
	is, err := collect(ctx, t.db, scanIssue, t.listIssues, conversationID, status, lim)
	if err != nil {
		return nil, fmt.Errorf("%s: list issues of %s: %w", t.name, conversationID, err)
	}
	ids := make([]string, len(is))
	for k, i := range is {
		ids[k] = i.ID
	}
	cs, err := t.comments(ctx, t.db, ids)
	if err != nil {
		return nil, fmt.Errorf("%s: list issues of %s: %w", t.name, conversationID, err)
	}
	for k := range is {
		is[k].Comments = cs[is[k].ID]
	}
	return is, nil
}

// AddIssueComment implements store.Store.
func (t *Tables) AddIssueComment(ctx context.Context, c store.IssueComment) (store.IssueComment, bool, error) {
	var (
		stored  store.IssueComment
		created bool
	)
	err := t.db.InTx(ctx, func(tx Tx) error {
		var one int
		if err := tx.QueryRow(ctx, t.lockIssue, c.IssueID).Scan(&one); err != nil {
			return t.notFound(err)
		}
		var err error
		stored, err = scanComment(tx.QueryRow(ctx, getCommentByKey, c.IssueID, c.IdempotencyKey))
		if err == nil {
			return nil
		}
		if !errors.Is(err, t.d.NoRows) {
			return err
		}
		if _, err := tx.Exec(ctx, insertComment, commentArgs(c)...); err != nil {
			return t.constraint(err)
		}
		if _, err := tx.Exec(ctx, commentedIssue, Millis(c.CreatedAt), c.Status, c.IssueID); err != nil {
			return err
		}
		stored, created = c, true
		stored.CreatedAt = ms(c.CreatedAt)
		return nil
	})
	if err != nil {
		return store.IssueComment{}, false, fmt.Errorf("%s: comment on issue %s: %w", t.name, c.IssueID, err)
	}
	return stored, created, nil
}

// comments returns the comments of the issues ids, by issue, each oldest
// first.
func (t *Tables) comments(ctx context.Context, c Conn, ids []string) (map[string][]store.IssueComment, error) {
	out := make(map[string][]store.IssueComment, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	for chunk := range slices.Chunk(ids, maxAnyOf) {
		cond, args := t.d.AnyOf("issue_id", chunk)
		cs, err := collect(ctx, c, scanComment, `SELECT `+commentColumns+` FROM issue_comments
	WHERE `+cond+` ORDER BY issue_id, seq`, args...)
		if err != nil {
			return nil, fmt.Errorf("comments: %w", err)
		}
		for _, c := range cs {
			out[c.IssueID] = append(out[c.IssueID], c)
		}
	}
	return out, nil
}

// maxAnyOf is the most values comments gives Dialect.AnyOf at once. SQLite
// makes each one a parameter, of which a statement has 32,766 at most.
const maxAnyOf = 256
