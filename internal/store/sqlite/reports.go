package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/store"
)

// AddReports implements store.Store.
func (s *Store) AddReports(ctx context.Context, tenant, env string, rs []contract.Report, received time.Time) (accepted, duplicates int, err error) {
	for i, r := range rs {
		if r.IdempotencyKey == "" {
			return 0, 0, fmt.Errorf("sqlite: add reports of %s/%s: report %d has no idempotency key", tenant, env, i)
		}
	}
	err = s.tx(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO reports
			(tenant, env, idempotency_key, kind, conversation_id, turn_id, time, body, received_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (tenant, env, idempotency_key) DO NOTHING`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, r := range rs {
			// The body and the time column say the same: the time in UTC ms.
			r.Time = fromMillis(millis(r.Time))
			body, err := json.Marshal(r)
			if err != nil {
				return fmt.Errorf("report %s: %w", r.IdempotencyKey, err)
			}
			res, err := stmt.ExecContext(ctx, tenant, env, r.IdempotencyKey, r.Kind, r.ConversationID, r.TurnID,
				millis(r.Time), string(body), millis(received))
			if err != nil {
				return fmt.Errorf("report %s: %w", r.IdempotencyKey, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return fmt.Errorf("report %s: %w", r.IdempotencyKey, err)
			}
			if n == 1 {
				accepted++
			} else {
				duplicates++
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("sqlite: add reports of %s/%s: %w", tenant, env, err)
	}
	return accepted, duplicates, nil
}

// ListReports implements store.Store.
func (s *Store) ListReports(ctx context.Context, conversationID string) ([]store.StoredReport, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT tenant, env, time, body, received_at FROM reports
		WHERE conversation_id = ? ORDER BY time, tenant, env, idempotency_key`, conversationID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list reports of %s: %w", conversationID, err)
	}
	rs, err := collect(rows, scanReport)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list reports of %s: %w", conversationID, err)
	}
	return rs, nil
}

func scanReport(r scanner) (store.StoredReport, error) {
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
