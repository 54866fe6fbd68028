package sqlcore

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/talkide/platform/internal/budget"
)

// The budget's tables (migration 0003_budgets.sql): the limits, the usage
// buckets, what reservations hold and the ledger, whose SQL both databases
// share. Admission (ReserveBudget), renewal, settlement and collection stay
// with each store: how one admission is kept from another's view is what
// differs most between them.

// UpsertBucket adds to a usage bucket. Its arguments: scope, subject,
// bucket, period start, cost, tokens, requests.
const UpsertBucket = `INSERT INTO budget_usage (scope, subject, bucket, period_start, cost, tokens, requests)
	VALUES ($1, $2, $3, $4, $5, $6, $7)
	ON CONFLICT (scope, subject, bucket, period_start) DO UPDATE SET
		cost = budget_usage.cost + excluded.cost,
		tokens = budget_usage.tokens + excluded.tokens,
		requests = budget_usage.requests + excluded.requests`

// LedgerColumns are the ledger's columns in the order of InsertLedger's
// arguments (LedgerArgs) and of ScanEntry.
const LedgerColumns = `id, tenant, env, user_id, conversation_id, model, status, streamed, estimated,
	input_tokens, output_tokens, cache_write_5m_tokens, cache_write_1h_tokens, cache_read_tokens,
	web_search_requests, web_fetch_requests, cost, reserved, request_bytes, started_at, settled_at`

// InsertLedger records a settled entry once: a second settlement of the
// same id affects no row.
const InsertLedger = `INSERT INTO budget_ledger (` + LedgerColumns + `)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)
	ON CONFLICT (id) DO NOTHING`

// SettleOne settles one entry with a store's batch settle, as
// budget.Store's SettleBudget: whether the entry was new.
func SettleOne(ctx context.Context, settle func(context.Context, []budget.Entry, *budget.SliceSize) ([]bool, error), e budget.Entry) (bool, error) {
	a, err := settle(ctx, []budget.Entry{e}, nil)
	if err != nil {
		return false, err
	}
	return a[0], nil
}

// LedgerArgs are InsertLedger's arguments for e.
func LedgerArgs(e budget.Entry) []any {
	return []any{e.ID, e.Tenant, e.Env, e.User, e.Conversation, e.Model, int64(e.Status), e.Streamed, e.Estimated,
		e.InputTokens, e.OutputTokens, e.CacheWrite5mTokens, e.CacheWrite1hTokens, e.CacheReadTokens,
		e.WebSearchRequests, e.WebFetchRequests, int64(e.Cost), int64(e.Reserved), e.RequestBytes,
		Millis(e.StartedAt), Millis(e.SettledAt)}
}

// ScanEntry scans a row of LedgerColumns.
func ScanEntry(r Row) (budget.Entry, error) {
	var (
		e                budget.Entry
		status           int64
		cost, reserved   int64
		started, settled int64
	)
	err := r.Scan(&e.ID, &e.Tenant, &e.Env, &e.User, &e.Conversation, &e.Model, &status, &e.Streamed, &e.Estimated,
		&e.InputTokens, &e.OutputTokens, &e.CacheWrite5mTokens, &e.CacheWrite1hTokens, &e.CacheReadTokens,
		&e.WebSearchRequests, &e.WebFetchRequests, &cost, &reserved, &e.RequestBytes, &started, &settled)
	e.Status = int(status)
	e.Cost, e.Reserved = budget.Money(cost), budget.Money(reserved)
	e.StartedAt, e.SettledAt = FromMillis(started), FromMillis(settled)
	return e, err
}

// Since is a time a snapshot query may leave zero: then no rows.
func Since(t time.Time) int64 {
	if t.IsZero() {
		return math.MaxInt64
	}
	return Millis(t)
}

// HeldWhere selects the reservations of a subject, with its parameters
// numbered from n.
func HeldWhere(sub budget.Subject, n int) (string, []any) {
	switch sub.Scope {
	case budget.ScopeUser:
		return fmt.Sprintf(`user_id = $%d`, n), []any{sub.ID}
	case budget.ScopeTenant:
		return fmt.Sprintf(`tenant = $%d`, n), []any{sub.ID}
	}
	t, e, _ := strings.Cut(sub.ID, "/")
	return fmt.Sprintf(`tenant = $%d AND env = $%d`, n, n+1), []any{t, e}
}

// PutBudgetLimit implements budget.Store.
func (t *Tables) PutBudgetLimit(ctx context.Context, l budget.Limit) error {
	_, err := t.db.Exec(ctx, `INSERT INTO budget_limits (scope, subject, kind, maximum, hard, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (scope, subject, kind) DO UPDATE SET
			maximum = excluded.maximum, hard = excluded.hard, updated_at = excluded.updated_at`,
		string(l.Subject.Scope), l.Subject.ID, string(l.Kind), l.Max, l.Hard, Millis(l.UpdatedAt))
	if err != nil {
		return fmt.Errorf("%s: put limit %s %s: %w", t.name, l.Subject, l.Kind, err)
	}
	return nil
}

// DeleteBudgetLimit implements budget.Store.
func (t *Tables) DeleteBudgetLimit(ctx context.Context, sub budget.Subject, k budget.Kind) error {
	_, err := t.db.Exec(ctx, `DELETE FROM budget_limits WHERE scope = $1 AND subject = $2 AND kind = $3`,
		string(sub.Scope), sub.ID, string(k))
	if err != nil {
		return fmt.Errorf("%s: delete limit %s %s: %w", t.name, sub, k, err)
	}
	return nil
}

// ScanLimit scans a row of budget_limits' scope, subject, kind, maximum,
// hard, updated_at.
func ScanLimit(r Row) (budget.Limit, error) {
	var (
		l           budget.Limit
		scope, kind string
		updated     int64
	)
	err := r.Scan(&scope, &l.Subject.ID, &kind, &l.Max, &l.Hard, &updated)
	l.Subject.Scope, l.Kind, l.UpdatedAt = budget.Scope(scope), budget.Kind(kind), FromMillis(updated)
	return l, err
}

// LimitsWhere returns the limits that where selects (all of them when it is
// empty), ordered by bytes. Only how several subjects are selected at once
// differs between the databases, so each store's BudgetLimits writes where.
func (t *Tables) LimitsWhere(ctx context.Context, where string, args ...any) ([]budget.Limit, error) {
	query := `SELECT scope, subject, kind, maximum, hard, updated_at FROM budget_limits`
	if where != "" {
		query += ` WHERE ` + where
	}
	by := t.d.ByBytes
	ls, err := collect(ctx, t.db, ScanLimit, query+` ORDER BY scope`+by+`, subject`+by+`, kind`+by, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: read limits: %w", t.name, err)
	}
	return ls, nil
}

// BudgetUsage implements budget.Store.
func (t *Tables) BudgetUsage(ctx context.Context, sub budget.Subject, size budget.BucketSize, from, to time.Time) ([]budget.Bucket, error) {
	bs, err := collect(ctx, t.db, func(r Row) (budget.Bucket, error) {
		b := budget.Bucket{Subject: sub, Size: size}
		var start, cost int64
		err := r.Scan(&start, &cost, &b.Tokens, &b.Requests)
		b.Start, b.Cost = FromMillis(start), budget.Money(cost)
		return b, err
	}, `SELECT period_start, cost, tokens, requests FROM budget_usage
		WHERE scope = $1 AND subject = $2 AND bucket = $3 AND period_start >= $4 AND period_start < $5
		ORDER BY period_start`, string(sub.Scope), sub.ID, string(size), Millis(from), Millis(to))
	if err != nil {
		return nil, fmt.Errorf("%s: read usage of %s: %w", t.name, sub, err)
	}
	return bs, nil
}

// BudgetHeld implements budget.Store.
func (t *Tables) BudgetHeld(ctx context.Context, sub budget.Subject, now time.Time) (budget.Held, error) {
	where, args := HeldWhere(sub, 2)
	var (
		h    budget.Held
		cost int64
	)
	// PostgreSQL's SUM of a BIGINT is a NUMERIC: cast back.
	err := t.db.QueryRow(ctx, `SELECT CAST(COALESCE(SUM(cost), 0) AS BIGINT), CAST(COALESCE(SUM(tokens), 0) AS BIGINT), CAST(COALESCE(SUM(calls), 0) AS BIGINT)
		FROM budget_reservations WHERE expires_at > $1 AND `+where, append([]any{Millis(now)}, args...)...).
		Scan(&cost, &h.Tokens, &h.Count)
	if err != nil {
		return budget.Held{}, fmt.Errorf("%s: read reservations of %s: %w", t.name, sub, err)
	}
	h.Cost = budget.Money(cost)
	return h, nil
}

// BudgetLedger implements budget.Store, ids ordered by bytes. The limit is
// a parameter, so that the query is one of a few texts.
func (t *Tables) BudgetLedger(ctx context.Context, q budget.LedgerQuery) ([]budget.Entry, error) {
	var (
		conds []string
		args  []any
	)
	add := func(cond string, v any) {
		args = append(args, v)
		conds = append(conds, fmt.Sprintf(cond, len(args)))
	}
	for _, f := range []struct{ col, v string }{{"user_id", q.User}, {"tenant", q.Tenant}, {"env", q.Env}, {"conversation_id", q.Conversation}} {
		if f.v != "" {
			add(f.col+` = $%d`, f.v)
		}
	}
	if !q.From.IsZero() {
		add(`settled_at >= $%d`, Millis(q.From))
	}
	if !q.To.IsZero() {
		add(`settled_at < $%d`, Millis(q.To))
	}
	query := `SELECT ` + LedgerColumns + ` FROM budget_ledger`
	if len(conds) > 0 {
		query += ` WHERE ` + strings.Join(conds, ` AND `)
	}
	query += ` ORDER BY settled_at DESC, id` + t.d.ByBytes + ` DESC`
	if q.Limit > 0 {
		args = append(args, int64(q.Limit))
		query += fmt.Sprintf(` LIMIT $%d`, len(args))
	}
	es, err := collect(ctx, t.db, ScanEntry, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: read ledger: %w", t.name, err)
	}
	return es, nil
}
