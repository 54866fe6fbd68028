package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/talkide/platform/internal/store"
)

const usageColumns = `id, tenant, env, conversation_id, user_id, model, status, streamed,
	input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens,
	started_at, duration_us`

// insertUsage stores one usage record unless its ID is stored already.
const insertUsage = `INSERT INTO usage_records (` + usageColumns + `)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (id) DO NOTHING`

// usageArgs are insertUsage's arguments for u.
func usageArgs(u store.UsageRecord) []any {
	return []any{u.ID, u.Tenant, u.Env, u.ConversationID, u.UserID, u.Model, u.Status, u.Streamed,
		u.InputTokens, u.OutputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens,
		millis(u.StartedAt), u.Duration.Microseconds()}
}

// RecordUsage implements store.Store.
func (s *Store) RecordUsage(ctx context.Context, u store.UsageRecord) error {
	if _, err := s.writer.ExecContext(ctx, insertUsage, usageArgs(u)...); err != nil {
		return fmt.Errorf("sqlite: record usage %s: %w", u.ID, err)
	}
	return nil
}

// RecordUsages implements store.Store: one write transaction, one
// statement prepared once (stmt.go) for the whole batch.
func (s *Store) RecordUsages(ctx context.Context, us []store.UsageRecord) error {
	if len(us) == 0 {
		return nil
	}
	err := s.tx(ctx, func(tx *sql.Tx) error {
		stmt, err := s.txStmt(ctx, tx, insertUsage)
		if err != nil {
			return err
		}
		for _, u := range us {
			if _, err := stmt.ExecContext(ctx, usageArgs(u)...); err != nil {
				return fmt.Errorf("usage %s: %w", u.ID, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlite: record %d usage records: %w", len(us), err)
	}
	return nil
}

// ListUsage implements store.Store.
func (s *Store) ListUsage(ctx context.Context, conversationID string) ([]store.UsageRecord, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+usageColumns+` FROM usage_records
		WHERE conversation_id = ? ORDER BY started_at, id`, conversationID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list usage of %s: %w", conversationID, err)
	}
	us, err := collect(rows, scanUsage)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list usage of %s: %w", conversationID, err)
	}
	return us, nil
}

func scanUsage(r scanner) (store.UsageRecord, error) {
	var (
		u                 store.UsageRecord
		started, duration int64
	)
	err := r.Scan(&u.ID, &u.Tenant, &u.Env, &u.ConversationID, &u.UserID, &u.Model, &u.Status, &u.Streamed,
		&u.InputTokens, &u.OutputTokens, &u.CacheCreationInputTokens, &u.CacheReadInputTokens,
		&started, &duration)
	if err != nil {
		return store.UsageRecord{}, err
	}
	u.StartedAt = fromMillis(started)
	u.Duration = time.Duration(duration) * time.Microsecond
	return u, nil
}
