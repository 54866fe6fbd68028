package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/talkide/platform/internal/store"
)

const issueColumns = `id, tenant, env, idempotency_key, conversation_id, user_id, turn_id,
	title, body, severity, labels, status, created_at, updated_at`

const commentColumns = `id, issue_id, idempotency_key, turn_id, body, status, created_at`

// CreateIssue implements store.Store. A concurrent insert of the same key
// makes this one wait for that transaction and then do nothing; the SELECT
// that follows (READ COMMITTED, a snapshot of its own) sees the winner's row.
func (s *Store) CreateIssue(ctx context.Context, i store.Issue) (store.Issue, bool, error) {
	labels, err := encodeLabels(i.Labels)
	if err != nil {
		return store.Issue{}, false, fmt.Errorf("postgres: create issue %s: %w", i.ID, err)
	}
	var (
		stored  store.Issue
		created bool
	)
	err = s.tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO issues (`+issueColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
			ON CONFLICT (tenant, env, idempotency_key) DO NOTHING`,
			i.ID, i.Tenant, i.Env, i.IdempotencyKey, i.ConversationID, i.UserID, i.TurnID,
			i.Title, i.Body, i.Severity, labels, i.Status, millis(i.CreatedAt), millis(i.UpdatedAt))
		if err != nil {
			return constraint(err)
		}
		created = tag.RowsAffected() == 1
		stored, err = scanIssue(tx.QueryRow(ctx, `SELECT `+issueColumns+` FROM issues
			WHERE tenant = $1 AND env = $2 AND idempotency_key = $3`, i.Tenant, i.Env, i.IdempotencyKey))
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
		return store.Issue{}, false, fmt.Errorf("postgres: create issue %s: %w", i.ID, err)
	}
	return stored, created, nil
}

// GetIssue implements store.Store.
func (s *Store) GetIssue(ctx context.Context, id string) (store.Issue, error) {
	i, err := scanIssue(s.pool.QueryRow(ctx, `SELECT `+issueColumns+` FROM issues WHERE id = $1`, id))
	if err != nil {
		return store.Issue{}, fmt.Errorf("postgres: get issue %s: %w", id, notFound(err))
	}
	cs, err := queryComments(ctx, s.pool, []string{id})
	if err != nil {
		return store.Issue{}, fmt.Errorf("postgres: get issue %s: %w", id, err)
	}
	i.Comments = cs[id]
	return i, nil
}

// ListIssues implements store.Store, ids compared by bytes.
func (s *Store) ListIssues(ctx context.Context, conversationID, status string, limit int) ([]store.Issue, error) {
	// LIMIT NULL is no limit.
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	rows, err := s.pool.Query(ctx, `SELECT `+issueColumns+` FROM issues
		WHERE conversation_id = $1 AND ($2 = '' OR status = $2)
		ORDER BY created_at DESC, id COLLATE "C" DESC
		LIMIT $3`, conversationID, status, lim)
	if err != nil {
		return nil, fmt.Errorf("postgres: list issues of %s: %w", conversationID, err)
	}
	is, err := collect(rows, scanIssue)
	if err != nil {
		return nil, fmt.Errorf("postgres: list issues of %s: %w", conversationID, err)
	}
	ids := make([]string, len(is))
	for k, i := range is {
		ids[k] = i.ID
	}
	cs, err := queryComments(ctx, s.pool, ids)
	if err != nil {
		return nil, fmt.Errorf("postgres: list issues of %s: %w", conversationID, err)
	}
	for k := range is {
		is[k].Comments = cs[is[k].ID]
	}
	return is, nil
}

// AddIssueComment implements store.Store. It locks the issue's row first, so
// that comments on one issue are added one at a time: the duplicate check
// and the next seq then see every comment committed before.
func (s *Store) AddIssueComment(ctx context.Context, c store.IssueComment) (store.IssueComment, bool, error) {
	var (
		stored  store.IssueComment
		created bool
	)
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM issues WHERE id = $1 FOR UPDATE`, c.IssueID).Scan(&one); err != nil {
			return notFound(err)
		}
		var err error
		stored, err = scanComment(tx.QueryRow(ctx, `SELECT `+commentColumns+` FROM issue_comments
			WHERE issue_id = $1 AND idempotency_key = $2`, c.IssueID, c.IdempotencyKey))
		if err == nil {
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO issue_comments (`+commentColumns+`, seq)
			VALUES ($1, $2, $3, $4, $5, $6, $7, (SELECT COALESCE(MAX(seq), 0) + 1 FROM issue_comments WHERE issue_id = $2))`,
			c.ID, c.IssueID, c.IdempotencyKey, c.TurnID, c.Body, c.Status, millis(c.CreatedAt))
		if err != nil {
			return constraint(err)
		}
		if _, err := tx.Exec(ctx, `UPDATE issues
			SET updated_at = GREATEST(updated_at, $1), status = CASE WHEN $2 = '' THEN status ELSE $2 END
			WHERE id = $3`, millis(c.CreatedAt), c.Status, c.IssueID); err != nil {
			return err
		}
		stored, created = c, true
		stored.CreatedAt = fromMillis(millis(c.CreatedAt))
		return nil
	})
	if err != nil {
		return store.IssueComment{}, false, fmt.Errorf("postgres: comment on issue %s: %w", c.IssueID, err)
	}
	return stored, created, nil
}

// querier is a *pgxpool.Pool or a pgx.Tx.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// queryComments returns the comments of the issues ids, by issue, each
// oldest first.
func queryComments(ctx context.Context, q querier, ids []string) (map[string][]store.IssueComment, error) {
	out := make(map[string][]store.IssueComment, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `SELECT `+commentColumns+` FROM issue_comments
		WHERE issue_id = ANY($1) ORDER BY issue_id, seq`, ids)
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

func scanIssue(r pgx.Row) (store.Issue, error) {
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

func scanComment(r pgx.Row) (store.IssueComment, error) {
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
