package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/talkide/platform/internal/store"
)

const usageColumns = `id, tenant, env, conversation_id, user_id, model, status, streamed,
	input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens,
	started_at, duration_us`

// RecordUsage implements store.Store.
func (s *Store) RecordUsage(ctx context.Context, u store.UsageRecord) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO usage_records (`+usageColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
		ON CONFLICT (id) DO NOTHING`,
		u.ID, u.Tenant, u.Env, u.ConversationID, u.UserID, u.Model, u.Status, u.Streamed,
		u.InputTokens, u.OutputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens,
		millis(u.StartedAt), u.Duration.Microseconds())
	if err != nil {
		return fmt.Errorf("postgres: record usage %s: %w", u.ID, err)
	}
	return nil
}

// ListUsage implements store.Store, ids compared by bytes.
func (s *Store) ListUsage(ctx context.Context, conversationID string) ([]store.UsageRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+usageColumns+` FROM usage_records
		WHERE conversation_id = $1 ORDER BY started_at, id COLLATE "C"`, conversationID)
	if err != nil {
		return nil, fmt.Errorf("postgres: list usage of %s: %w", conversationID, err)
	}
	us, err := collect(rows, scanUsage)
	if err != nil {
		return nil, fmt.Errorf("postgres: list usage of %s: %w", conversationID, err)
	}
	return us, nil
}

func scanUsage(r pgx.Row) (store.UsageRecord, error) {
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
