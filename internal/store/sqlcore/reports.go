package sqlcore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/store"
)

// Reports: the whole report as JSON in body, and beside it the columns
// that select and order them.

const insertReport = `INSERT INTO reports
	(tenant, env, idempotency_key, kind, conversation_id, turn_id, time, body, received_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
	ON CONFLICT (tenant, env, idempotency_key) DO NOTHING`

// listReports: by time, then tenant, env and idempotency key.
func listReports(d Dialect) string {
	return `SELECT tenant, env, time, body, received_at FROM reports
	WHERE conversation_id = $1
	ORDER BY time, tenant` + d.ByBytes + `, env` + d.ByBytes + `, idempotency_key` + d.ByBytes
}

// reportArgs are insertReport's arguments for r. The body and the time
// column say the same: the time in UTC to the millisecond.
func reportArgs(tenant, env string, r contract.Report, received time.Time) ([]any, error) {
	r.Time = ms(r.Time)
	body, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return []any{tenant, env, r.IdempotencyKey, r.Kind, r.ConversationID, r.TurnID,
		Millis(r.Time), string(body), Millis(received)}, nil
}

func scanReport(r Row) (store.StoredReport, error) {
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
	sr.Report.Time = FromMillis(at)
	sr.ReceivedAt = FromMillis(received)
	return sr, nil
}

// AddReports implements store.Store. The batch's first report of each key
// is inserted, in key order (for the reason RecordUsages gives), in one
// transaction; every other report is a duplicate.
func (t *Tables) AddReports(ctx context.Context, tenant, env string, rs []contract.Report, received time.Time) (added []int, duplicates int, err error) {
	for i, r := range rs {
		if r.IdempotencyKey == "" {
			return nil, 0, fmt.Errorf("%s: add reports of %s/%s: report %d has no idempotency key", t.name, tenant, env, i)
		}
	}
	seen := make(map[string]bool, len(rs))
	first := make([]int, 0, len(rs)) // indexes in rs
	for i, r := range rs {
		if !seen[r.IdempotencyKey] {
			seen[r.IdempotencyKey] = true
			first = append(first, i)
		}
	}
	if len(first) == 0 {
		return nil, 0, nil
	}
	slices.SortFunc(first, func(a, b int) int { return strings.Compare(rs[a].IdempotencyKey, rs[b].IdempotencyKey) })
	args := make([][]any, len(first))
	for i, k := range first {
		if args[i], err = reportArgs(tenant, env, rs[k], received); err != nil {
			return nil, 0, fmt.Errorf("%s: add reports of %s/%s: report %s: %w", t.name, tenant, env, rs[k].IdempotencyKey, err)
		}
	}
	var n []int64
	err = t.db.InTx(ctx, func(tx Tx) error {
		var err error
		n, err = tx.ExecEach(ctx, insertReport, args)
		if err != nil && len(n) < len(first) {
			return fmt.Errorf("report %s: %w", rs[first[len(n)]].IdempotencyKey, err)
		}
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("%s: add reports of %s/%s: %w", t.name, tenant, env, err)
	}
	for i, k := range n {
		if k > 0 {
			added = append(added, first[i])
		}
	}
	slices.Sort(added)
	return added, len(rs) - len(added), nil
}

// ListReports implements store.Store.
func (t *Tables) ListReports(ctx context.Context, conversationID string) ([]store.StoredReport, error) {
	rs, err := collect(ctx, t.db, scanReport, t.listReports, conversationID)
	if err != nil {
		return nil, fmt.Errorf("%s: list reports of %s: %w", t.name, conversationID, err)
	}
	return rs, nil
}
