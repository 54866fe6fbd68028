package sqlcore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/talkide/platform/internal/store"
)

const usageColumns = `id, tenant, env, conversation_id, user_id, model, status, streamed,
	input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens,
	started_at, duration_us, purpose`

// insertUsage stores one usage record unless its ID is stored already.
const insertUsage = `INSERT INTO usage_records (` + usageColumns + `)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
	ON CONFLICT (id) DO NOTHING`

// listUsage: oldest first, then by ID.
func listUsage(d Dialect) string {
	return `SELECT ` + usageColumns + ` FROM usage_records
	WHERE conversation_id = $1 ORDER BY started_at, id` + d.ByBytes
}

func usageArgs(u store.UsageRecord) []any {
	return []any{u.ID, u.Tenant, u.Env, u.ConversationID, u.UserID, u.Model, u.Status, u.Streamed,
		u.InputTokens, u.OutputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens,
		Millis(u.StartedAt), u.Duration.Microseconds(), u.Purpose}
}

func scanUsage(r Row) (store.UsageRecord, error) {
	var (
		u                 store.UsageRecord
		started, duration int64
	)
	err := r.Scan(&u.ID, &u.Tenant, &u.Env, &u.ConversationID, &u.UserID, &u.Model, &u.Status, &u.Streamed,
		&u.InputTokens, &u.OutputTokens, &u.CacheCreationInputTokens, &u.CacheReadInputTokens,
		&started, &duration, &u.Purpose)
	if err != nil {
		return store.UsageRecord{}, err
	}
	u.StartedAt = FromMillis(started)
	u.Duration = time.Duration(duration) * time.Microsecond
	return u, nil
}

// RecordUsage implements store.Store.
func (t *Tables) RecordUsage(ctx context.Context, u store.UsageRecord) error {
	if _, err := t.db.Exec(ctx, insertUsage, usageArgs(u)...); err != nil {
		return fmt.Errorf("%s: record usage %s: %w", t.name, u.ID, err)
	}
	return nil
}

// RecordUsages implements store.Store: one transaction, the records in ID
// order. On PostgreSQL the order matters: an insert of a key that another
// open transaction has inserted waits for it, so two batches that took
// their keys in different orders could each wait for the other (and one
// would fail as a deadlock); in one order they only queue. The sort is
// stable, so of two records with one ID the first in us is inserted and the
// other ignored.
func (t *Tables) RecordUsages(ctx context.Context, us []store.UsageRecord) error {
	if len(us) == 0 {
		return nil
	}
	sorted := slices.Clone(us)
	slices.SortStableFunc(sorted, func(a, b store.UsageRecord) int { return strings.Compare(a.ID, b.ID) })
	args := make([][]any, len(sorted))
	for i, u := range sorted {
		args[i] = usageArgs(u)
	}
	err := t.db.InTx(ctx, func(tx Tx) error {
		n, err := tx.ExecEach(ctx, insertUsage, args)
		if err != nil && len(n) < len(sorted) {
			return fmt.Errorf("usage %s: %w", sorted[len(n)].ID, err)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: record %d usage records: %w", t.name, len(us), err)
	}
	return nil
}

// ListUsage implements store.Store.
func (t *Tables) ListUsage(ctx context.Context, conversationID string) ([]store.UsageRecord, error) {
	us, err := collect(ctx, t.db, scanUsage, t.listUsage, conversationID)
	if err != nil {
		return nil, fmt.Errorf("%s: list usage of %s: %w", t.name, conversationID, err)
	}
	return us, nil
}
