package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/talkide/platform/internal/store"
)

const issueColumns = `id, tenant, env, idempotency_key, conversation_id, user_id, turn_id,
	title, body, severity, labels, status, created_at, updated_at`

const commentColumns = `id, issue_id, idempotency_key, turn_id, body, status, created_at`

// CreateIssue implements store.Store.
func (s *Store) CreateIssue(ctx context.Context, i store.Issue) (store.Issue, bool, error) {
	labels, err := encodeLabels(i.Labels)
	if err != nil {
		return store.Issue{}, false, fmt.Errorf("sqlite: create issue %s: %w", i.ID, err)
	}
	var (
		stored  store.Issue
		created bool
	)
	err = s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO issues (`+issueColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (tenant, env, idempotency_key) DO NOTHING`,
			i.ID, i.Tenant, i.Env, i.IdempotencyKey, i.ConversationID, i.UserID, i.TurnID,
			i.Title, i.Body, i.Severity, labels, i.Status, millis(i.CreatedAt), millis(i.UpdatedAt))
		if err != nil {
			return constraint(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			created = true
		}
		stored, err = scanIssue(tx.QueryRowContext(ctx, `SELECT `+issueColumns+` FROM issues
			WHERE tenant = ? AND env = ? AND idempotency_key = ?`, i.Tenant, i.Env, i.IdempotencyKey))
		if err != nil {
			return err
		}
		if !created {
			if stored.ConversationID != i.ConversationID {
				return fmt.Errorf("%w: idempotency key %q names an issue of another conversation", store.ErrConflict, i.IdempotencyKey)
			}
			cs, err := queryComments(ctx, tx, []string{stored.ID})
			if err != nil {
				return err
			}
			stored.Comments = cs[stored.ID]
		}
		return nil
	})
	if err != nil {
		return store.Issue{}, false, fmt.Errorf("sqlite: create issue %s: %w", i.ID, err)
	}
	return stored, created, nil
}

// GetIssue implements store.Store.
func (s *Store) GetIssue(ctx context.Context, id string) (store.Issue, error) {
	i, err := scanIssue(s.reader.QueryRowContext(ctx, `SELECT `+issueColumns+` FROM issues WHERE id = ?`, id))
	if err != nil {
		return store.Issue{}, fmt.Errorf("sqlite: get issue %s: %w", id, notFound(err))
	}
	cs, err := queryComments(ctx, s.reader, []string{id})
	if err != nil {
		return store.Issue{}, fmt.Errorf("sqlite: get issue %s: %w", id, err)
	}
	i.Comments = cs[id]
	return i, nil
}

// ListIssues implements store.Store.
func (s *Store) ListIssues(ctx context.Context, conversationID, status string, limit int) ([]store.Issue, error) {
	q := `SELECT ` + issueColumns + ` FROM issues WHERE conversation_id = ?`
	args := []any{conversationID}
	if status != "" {
		q += ` AND status = ?`
		args = append(args, status)
	}
	q += ` ORDER BY created_at DESC, id DESC`
	if limit > 0 {
		q += ` LIMIT ?`
		args = append(args, limit)
	}
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list issues of %s: %w", conversationID, err)
	}
	is, err := collect(rows, scanIssue)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list issues of %s: %w", conversationID, err)
	}
	ids := make([]string, len(is))
	for k, i := range is {
		ids[k] = i.ID
	}
	cs, err := queryComments(ctx, s.reader, ids)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list issues of %s: %w", conversationID, err)
	}
	for k := range is {
		is[k].Comments = cs[is[k].ID]
	}
	return is, nil
}

// AddIssueComment implements store.Store. The write transaction is
// exclusive (BEGIN IMMEDIATE on the one writer connection), so reading the
// next seq and inserting it cannot race.
func (s *Store) AddIssueComment(ctx context.Context, c store.IssueComment) (store.IssueComment, bool, error) {
	var (
		stored  store.IssueComment
		created bool
	)
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM issues WHERE id = ?`, c.IssueID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound
		}
		var err error
		stored, err = scanComment(tx.QueryRowContext(ctx, `SELECT `+commentColumns+` FROM issue_comments
			WHERE issue_id = ? AND idempotency_key = ?`, c.IssueID, c.IdempotencyKey))
		if err == nil {
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO issue_comments (`+commentColumns+`, seq)
			VALUES (?, ?, ?, ?, ?, ?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM issue_comments WHERE issue_id = ?))`,
			c.ID, c.IssueID, c.IdempotencyKey, c.TurnID, c.Body, c.Status, millis(c.CreatedAt), c.IssueID)
		if err != nil {
			return constraint(err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE issues
			SET updated_at = MAX(updated_at, ?), status = CASE WHEN ? = '' THEN status ELSE ? END
			WHERE id = ?`, millis(c.CreatedAt), c.Status, c.Status, c.IssueID); err != nil {
			return err
		}
		stored, created = c, true
		stored.CreatedAt = fromMillis(millis(c.CreatedAt))
		return nil
	})
	if err != nil {
		return store.IssueComment{}, false, fmt.Errorf("sqlite: comment on issue %s: %w", c.IssueID, err)
	}
	return stored, created, nil
}

// querier is a *sql.DB or *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryComments returns the comments of the issues ids, by issue, each
// oldest first.
func queryComments(ctx context.Context, q querier, ids []string) (map[string][]store.IssueComment, error) {
	out := make(map[string][]store.IssueComment, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	args := make([]any, len(ids))
	for k, id := range ids {
		args[k] = id
	}
	rows, err := q.QueryContext(ctx, `SELECT `+commentColumns+` FROM issue_comments
		WHERE issue_id IN (?`+strings.Repeat(`, ?`, len(ids)-1)+`) ORDER BY issue_id, seq`, args...)
	if err != nil {
		return nil, fmt.Errorf("comments: %w", err)
	}
	cs, err := collect(rows, scanComment)
	if err != nil {
		return nil, fmt.Errorf("comments: %w", err)
	}
	for _, c := range cs {
		out[c.IssueID] = append(out[c.IssueID], c)
	}
	return out, nil
}

func scanIssue(r scanner) (store.Issue, error) {
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
	i.CreatedAt, i.UpdatedAt = fromMillis(created), fromMillis(updated)
	return i, nil
}

func scanComment(r scanner) (store.IssueComment, error) {
	var (
		c       store.IssueComment
		created int64
	)
	if err := r.Scan(&c.ID, &c.IssueID, &c.IdempotencyKey, &c.TurnID, &c.Body, &c.Status, &created); err != nil {
		return store.IssueComment{}, err
	}
	c.CreatedAt = fromMillis(created)
	return c, nil
}

// encodeLabels keeps labels as a JSON array; nil is [].
func encodeLabels(labels []string) (string, error) {
	if labels == nil {
		labels = []string{}
	}
	b, err := json.Marshal(labels)
	return string(b), err
}
