package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/talkide/platform/internal/store"
)

const usageColumns = `id, tenant, env, conversation_id, user_id, model, status, streamed,
	input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens,
	started_at, duration_us`

// insertUsage stores one usage record unless its ID is stored already.
const insertUsage = `INSERT INTO usage_records (` + usageColumns + `)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
	ON CONFLICT (id) DO NOTHING`

// usageArgs are insertUsage's arguments for u.
func usageArgs(u store.UsageRecord) []any {
	return []any{u.ID, u.Tenant, u.Env, u.ConversationID, u.UserID, u.Model, u.Status, u.Streamed,
		u.InputTokens, u.OutputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens,
		millis(u.StartedAt), u.Duration.Microseconds()}
}

// RecordUsage implements store.Store.
func (s *Store) RecordUsage(ctx context.Context, u store.UsageRecord) error {
	if _, err := s.pool.Exec(ctx, insertUsage, usageArgs(u)...); err != nil {
		return fmt.Errorf("postgres: record usage %s: %w", u.ID, err)
	}
	return nil
}

// RecordUsages implements store.Store: one transaction sent as one
// pgx.Batch. As in AddReports, the records go in ID order, so that
// overlapping batches from several replicas queue instead of deadlocking;
// the sort is stable, so of two records with one ID the first in us is
// inserted and the other ignored.
func (s *Store) RecordUsages(ctx context.Context, us []store.UsageRecord) error {
	if len(us) == 0 {
		return nil
	}
	sorted := slices.Clone(us)
	slices.SortStableFunc(sorted, func(a, b store.UsageRecord) int { return strings.Compare(a.ID, b.ID) })
	b := &pgx.Batch{}
	for _, u := range sorted {
		b.Queue(insertUsage, usageArgs(u)...)
	}
	err := s.tx(ctx, func(tx pgx.Tx) error {
		res := tx.SendBatch(ctx, b)
		for _, u := range sorted {
			if _, err := res.Exec(); err != nil {
				res.Close()
				return fmt.Errorf("usage %s: %w", u.ID, err)
			}
		}
		return res.Close()
	})
	if err != nil {
		return fmt.Errorf("postgres: record %d usage records: %w", len(us), err)
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
