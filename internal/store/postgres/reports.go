package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/store"
)

// AddReports implements store.Store.
//
// The batch's first report of each key is inserted, in key order, in one
// transaction sent as one pgx.Batch. The order matters: a transaction that
// inserts a key another open transaction has inserted waits for it, so two
// batches that took their keys in different orders could each wait for the
// other (PostgreSQL would break the deadlock by failing one). In one order
// they only queue.
func (s *Store) AddReports(ctx context.Context, tenant, env string, rs []contract.Report, received time.Time) (accepted, duplicates int, err error) {
	for i, r := range rs {
		if r.IdempotencyKey == "" {
			return 0, 0, fmt.Errorf("postgres: add reports of %s/%s: report %d has no idempotency key", tenant, env, i)
		}
	}
	// The first of a key in rs counts; a later one is a duplicate.
	seen := make(map[string]bool, len(rs))
	first := make([]contract.Report, 0, len(rs))
	for _, r := range rs {
		if !seen[r.IdempotencyKey] {
			seen[r.IdempotencyKey] = true
			first = append(first, r)
		}
	}
	slices.SortFunc(first, func(a, b contract.Report) int { return strings.Compare(a.IdempotencyKey, b.IdempotencyKey) })

	b := &pgx.Batch{}
	for _, r := range first {
		// The body and the time column say the same: the time in UTC ms.
		r.Time = fromMillis(millis(r.Time))
		body, err := json.Marshal(r)
		if err != nil {
			return 0, 0, fmt.Errorf("postgres: add reports of %s/%s: report %s: %w", tenant, env, r.IdempotencyKey, err)
		}
		b.Queue(`INSERT INTO reports
			(tenant, env, idempotency_key, kind, conversation_id, turn_id, time, body, received_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (tenant, env, idempotency_key) DO NOTHING`,
			tenant, env, r.IdempotencyKey, r.Kind, r.ConversationID, r.TurnID,
			millis(r.Time), string(body), millis(received))
	}
	if len(first) > 0 {
		err = s.tx(ctx, func(tx pgx.Tx) error {
			accepted = 0
			res := tx.SendBatch(ctx, b)
			for _, r := range first {
				tag, err := res.Exec()
				if err != nil {
					res.Close()
					return fmt.Errorf("report %s: %w", r.IdempotencyKey, err)
				}
				accepted += int(tag.RowsAffected())
			}
			return res.Close()
		})
	}
	if err != nil {
		return 0, 0, fmt.Errorf("postgres: add reports of %s/%s: %w", tenant, env, err)
	}
	return accepted, len(rs) - accepted, nil
}

// ListReports implements store.Store, strings compared by bytes.
func (s *Store) ListReports(ctx context.Context, conversationID string) ([]store.StoredReport, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant, env, time, body, received_at FROM reports
		WHERE conversation_id = $1
		ORDER BY time, tenant COLLATE "C", env COLLATE "C", idempotency_key COLLATE "C"`, conversationID)
	if err != nil {
		return nil, fmt.Errorf("postgres: list reports of %s: %w", conversationID, err)
	}
	rs, err := collect(rows, scanReport)
	if err != nil {
		return nil, fmt.Errorf("postgres: list reports of %s: %w", conversationID, err)
	}
	return rs, nil
}

func scanReport(r pgx.Row) (store.StoredReport, error) {
	var (
		sr           store.StoredReport
		at, received int64
		body         string
	)
	if err := r.Scan(&sr.Tenant, &sr.Env, &at, &body, &received); err != nil {
		return store.StoredReport{}, err
	}
	if err := json.Unmarshal([]byte(body), &sr.Report); err != nil {
		return store.StoredReport{}, fmt.Errorf("report body: %w", err)
	}
	sr.Report.Time = fromMillis(at)
	sr.ReceivedAt = fromMillis(received)
	return sr, nil
}
