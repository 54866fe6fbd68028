package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/store/sqlcore"
)

// The budget's tables (migration 0003_budgets.sql). SQLite runs one write
// transaction at a time (the writer pool has one connection and begins
// IMMEDIATE, which also locks out other processes), so an admission that
// reads the snapshot and writes its reservation in one transaction is
// serialised with every other one.

var _ budget.Store = (*Store)(nil)

// ReserveBudget implements budget.Store.
func (s *Store) ReserveBudget(ctx context.Context, in budget.Reservation, q budget.SnapshotQuery, admit func(*budget.Snapshot, *budget.Reservation) error) error {
	var denied error
	err := s.tx(ctx, func(tx *sql.Tx) error {
		st := s.stmts(ctx, tx)
		snap, err := loadSnapshot(st, in.ID, q)
		if err != nil {
			return err
		}
		r := in
		if denied = admit(snap, &r); denied != nil {
			return denied
		}
		_, err = st.exec(`INSERT INTO budget_reservations
			(id, user_id, tenant, env, cost, tokens, created_at, expires_at, calls) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET cost = excluded.cost, tokens = excluded.tokens, expires_at = excluded.expires_at`,
			r.ID, r.User, r.Tenant, r.Env, int64(r.Cost), r.Tokens, sqlcore.Millis(r.CreatedAt), sqlcore.Millis(r.ExpiresAt), r.Calls())
		if err != nil || snap.Exists {
			return err
		}
		minute := sqlcore.Millis(budget.BucketMinute.Start(r.CreatedAt))
		for _, sub := range q.Subjects {
			if _, err := st.exec(upsertBucket, sub.Scope, sub.ID, budget.BucketMinute, minute, 0, 0, 1); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && err == denied {
		return err
	}
	if err != nil {
		return fmt.Errorf("sqlite: reserve budget %s: %w", in.ID, err)
	}
	return nil
}

// upsertBucket adds to a usage bucket.
const upsertBucket = `INSERT INTO budget_usage (scope, subject, bucket, period_start, cost, tokens, requests)
	VALUES (?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (scope, subject, bucket, period_start) DO UPDATE SET
		cost = budget_usage.cost + excluded.cost,
		tokens = budget_usage.tokens + excluded.tokens,
		requests = budget_usage.requests + excluded.requests`

// heldWhere selects the reservations of a subject.
func heldWhere(sub budget.Subject) (string, []any) {
	switch sub.Scope {
	case budget.ScopeUser:
		return `user_id = ?`, []any{sub.ID}
	case budget.ScopeTenant:
		return `tenant = ?`, []any{sub.ID}
	}
	t, e, _ := strings.Cut(sub.ID, "/")
	return `tenant = ? AND env = ?`, []any{t, e}
}

// fromMillis of a time the query may leave zero: no rows.
func since(t time.Time) int64 {
	if t.IsZero() {
		return math.MaxInt64
	}
	return sqlcore.Millis(t)
}

func loadSnapshot(st *txStmts, id string, q budget.SnapshotQuery) (*budget.Snapshot, error) {
	snap := &budget.Snapshot{Held: make(map[budget.Subject]budget.Held, len(q.Subjects))}
	now := sqlcore.Millis(q.Now)
	for _, sub := range q.Subjects {
		rows, err := st.query(`SELECT bucket, period_start, cost, tokens, requests FROM budget_usage
			WHERE scope = ? AND subject = ? AND (
				(bucket = 'day' AND period_start >= ?) OR
				(bucket = '5m' AND period_start >= ?) OR
				(bucket = 'minute' AND period_start >= ?))`,
			sub.Scope, sub.ID, since(q.DaysFrom), since(q.FiveMinFrom), since(q.MinuteFrom))
		if err != nil {
			return nil, err
		}
		bs, err := collect(rows, func(r scanner) (budget.Bucket, error) {
			b := budget.Bucket{Subject: sub}
			var start, cost int64
			err := r.Scan(&b.Size, &start, &cost, &b.Tokens, &b.Requests)
			b.Start, b.Cost = sqlcore.FromMillis(start), budget.Money(cost)
			return b, err
		})
		if err != nil {
			return nil, err
		}
		snap.Buckets = append(snap.Buckets, bs...)

		where, args := heldWhere(sub)
		var h budget.Held
		var cost int64
		row, err := st.queryRow(`SELECT COALESCE(SUM(cost), 0), COALESCE(SUM(tokens), 0), COALESCE(SUM(calls), 0)
			FROM budget_reservations WHERE `+where+` AND expires_at > ? AND id <> ?`,
			append(args, now, id)...)
		if err == nil {
			err = row.Scan(&cost, &h.Tokens, &h.Count)
		}
		if err != nil {
			return nil, err
		}
		h.Cost = budget.Money(cost)
		snap.Held[sub] = h
	}
	var (
		own            budget.Reservation
		cost           int64
		created, until int64
	)
	row, err := st.queryRow(`SELECT user_id, tenant, env, cost, tokens, created_at, expires_at
		FROM budget_reservations WHERE id = ?`, id)
	if err == nil {
		err = row.Scan(&own.User, &own.Tenant, &own.Env, &cost, &own.Tokens, &created, &until)
	}
	switch {
	case err == sql.ErrNoRows:
	case err != nil:
		return nil, err
	default:
		snap.Exists = true
		if until > now {
			own.ID, own.Cost = id, budget.Money(cost)
			own.CreatedAt, own.ExpiresAt = sqlcore.FromMillis(created), sqlcore.FromMillis(until)
			snap.Own = &own
		}
	}
	return snap, nil
}

// RenewBudget implements budget.Store.
func (s *Store) RenewBudget(ctx context.Context, ids []string, now, expires time.Time) error {
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 500)]
		ids = ids[len(chunk):]
		args := []any{sqlcore.Millis(expires), sqlcore.Millis(now)}
		for _, id := range chunk {
			args = append(args, id)
		}
		_, err := s.writer.ExecContext(ctx, `UPDATE budget_reservations SET expires_at = MAX(expires_at, ?)
			WHERE expires_at > ? AND id IN (?`+strings.Repeat(", ?", len(chunk)-1)+`)`, args...)
		if err != nil {
			return fmt.Errorf("sqlite: renew reservations: %w", err)
		}
	}
	return nil
}

const ledgerColumns = `id, tenant, env, user_id, conversation_id, model, status, streamed, estimated,
	input_tokens, output_tokens, cache_write_5m_tokens, cache_write_1h_tokens, cache_read_tokens,
	web_search_requests, web_fetch_requests, cost, reserved, request_bytes, started_at, settled_at`

// SettleBudget implements budget.Store.
func (s *Store) SettleBudget(ctx context.Context, e budget.Entry) (applied bool, err error) {
	a, err := s.SettleBudgetBatch(ctx, []budget.Entry{e}, nil)
	if err != nil {
		return false, err
	}
	return a[0], nil
}

// SettleBudgetBatch implements budget.Store.
func (s *Store) SettleBudgetBatch(ctx context.Context, es []budget.Entry, lease *budget.SliceSize) ([]bool, error) {
	applied := make([]bool, len(es))
	err := s.tx(ctx, func(tx *sql.Tx) error {
		st := s.stmts(ctx, tx)
		for i, e := range es {
			res, err := st.exec(insertLedger,
				e.ID, e.Tenant, e.Env, e.User, e.Conversation, e.Model, e.Status, e.Streamed, e.Estimated,
				e.InputTokens, e.OutputTokens, e.CacheWrite5mTokens, e.CacheWrite1hTokens, e.CacheReadTokens,
				e.WebSearchRequests, e.WebFetchRequests, int64(e.Cost), int64(e.Reserved), e.RequestBytes,
				sqlcore.Millis(e.StartedAt), sqlcore.Millis(e.SettledAt))
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			applied[i] = n == 1
			if lease == nil {
				if _, err := st.exec(deleteReservation, e.ID); err != nil {
					return err
				}
			}
		}
		for _, b := range budget.SettledBuckets(es, applied) {
			_, err := st.exec(upsertBucket, b.Subject.Scope, b.Subject.ID, b.Size, sqlcore.Millis(b.Start), int64(b.Cost), b.Tokens, b.Requests)
			if err != nil {
				return err
			}
		}
		if lease == nil {
			return nil
		}
		var err error
		if lease.Cost == 0 && lease.Tokens == 0 {
			_, err = st.exec(deleteReservation, lease.ID)
		} else {
			_, err = st.exec(`UPDATE budget_reservations SET cost = ?, tokens = ? WHERE id = ?`,
				int64(lease.Cost), lease.Tokens, lease.ID)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: settle %s: %w", budget.BatchName(es, lease), err)
	}
	return applied, nil
}

const deleteReservation = `DELETE FROM budget_reservations WHERE id = ?`

const insertLedger = `INSERT INTO budget_ledger (` + ledgerColumns + `)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (id) DO NOTHING`

// CollectBudget implements budget.Store.
func (s *Store) CollectBudget(ctx context.Context, now time.Time) error {
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM budget_reservations WHERE expires_at < ?`,
			sqlcore.Millis(now.Add(-time.Hour))); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM budget_usage WHERE
			(bucket = '5m' AND period_start < ?) OR (bucket = 'minute' AND period_start < ?)`,
			sqlcore.Millis(now.Add(-6*time.Hour)), sqlcore.Millis(now.Add(-10*time.Minute)))
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: collect budget: %w", err)
	}
	return nil
}

// PutBudgetLimit implements budget.Store.
func (s *Store) PutBudgetLimit(ctx context.Context, l budget.Limit) error {
	_, err := s.writer.ExecContext(ctx, `INSERT INTO budget_limits (scope, subject, kind, maximum, hard, updated_at)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (scope, subject, kind) DO UPDATE SET
			maximum = excluded.maximum, hard = excluded.hard, updated_at = excluded.updated_at`,
		l.Subject.Scope, l.Subject.ID, l.Kind, l.Max, l.Hard, sqlcore.Millis(l.UpdatedAt))
	if err != nil {
		return fmt.Errorf("sqlite: put limit %s %s: %w", l.Subject, l.Kind, err)
	}
	return nil
}

// DeleteBudgetLimit implements budget.Store.
func (s *Store) DeleteBudgetLimit(ctx context.Context, sub budget.Subject, k budget.Kind) error {
	_, err := s.writer.ExecContext(ctx, `DELETE FROM budget_limits WHERE scope = ? AND subject = ? AND kind = ?`,
		sub.Scope, sub.ID, k)
	if err != nil {
		return fmt.Errorf("sqlite: delete limit %s %s: %w", sub, k, err)
	}
	return nil
}

// BudgetLimits implements budget.Store.
func (s *Store) BudgetLimits(ctx context.Context, subjects ...budget.Subject) ([]budget.Limit, error) {
	query := `SELECT scope, subject, kind, maximum, hard, updated_at FROM budget_limits`
	var args []any
	if len(subjects) > 0 {
		conds := make([]string, len(subjects))
		for i, sub := range subjects {
			conds[i] = `(scope = ? AND subject = ?)`
			args = append(args, sub.Scope, sub.ID)
		}
		query += ` WHERE ` + strings.Join(conds, ` OR `)
	}
	rows, err := s.reader.QueryContext(ctx, query+` ORDER BY scope, subject, kind`, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: read limits: %w", err)
	}
	ls, err := collect(rows, func(r scanner) (budget.Limit, error) {
		var (
			l       budget.Limit
			updated int64
		)
		err := r.Scan(&l.Subject.Scope, &l.Subject.ID, &l.Kind, &l.Max, &l.Hard, &updated)
		l.UpdatedAt = sqlcore.FromMillis(updated)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: read limits: %w", err)
	}
	return ls, nil
}

// BudgetUsage implements budget.Store.
func (s *Store) BudgetUsage(ctx context.Context, sub budget.Subject, size budget.BucketSize, from, to time.Time) ([]budget.Bucket, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT period_start, cost, tokens, requests FROM budget_usage
		WHERE scope = ? AND subject = ? AND bucket = ? AND period_start >= ? AND period_start < ?
		ORDER BY period_start`, sub.Scope, sub.ID, size, sqlcore.Millis(from), sqlcore.Millis(to))
	if err != nil {
		return nil, fmt.Errorf("sqlite: read usage of %s: %w", sub, err)
	}
	bs, err := collect(rows, func(r scanner) (budget.Bucket, error) {
		b := budget.Bucket{Subject: sub, Size: size}
		var start, cost int64
		err := r.Scan(&start, &cost, &b.Tokens, &b.Requests)
		b.Start, b.Cost = sqlcore.FromMillis(start), budget.Money(cost)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: read usage of %s: %w", sub, err)
	}
	return bs, nil
}

// BudgetHeld implements budget.Store.
func (s *Store) BudgetHeld(ctx context.Context, sub budget.Subject, now time.Time) (budget.Held, error) {
	where, args := heldWhere(sub)
	var (
		h    budget.Held
		cost int64
	)
	err := s.reader.QueryRowContext(ctx, `SELECT COALESCE(SUM(cost), 0), COALESCE(SUM(tokens), 0), COALESCE(SUM(calls), 0)
		FROM budget_reservations WHERE `+where+` AND expires_at > ?`, append(args, sqlcore.Millis(now))...).
		Scan(&cost, &h.Tokens, &h.Count)
	if err != nil {
		return budget.Held{}, fmt.Errorf("sqlite: read reservations of %s: %w", sub, err)
	}
	h.Cost = budget.Money(cost)
	return h, nil
}

// BudgetLedger implements budget.Store.
func (s *Store) BudgetLedger(ctx context.Context, q budget.LedgerQuery) ([]budget.Entry, error) {
	var (
		conds []string
		args  []any
	)
	for _, f := range []struct {
		col, v string
	}{{"user_id", q.User}, {"tenant", q.Tenant}, {"env", q.Env}, {"conversation_id", q.Conversation}} {
		if f.v != "" {
			conds = append(conds, f.col+` = ?`)
			args = append(args, f.v)
		}
	}
	if !q.From.IsZero() {
		conds = append(conds, `settled_at >= ?`)
		args = append(args, sqlcore.Millis(q.From))
	}
	if !q.To.IsZero() {
		conds = append(conds, `settled_at < ?`)
		args = append(args, sqlcore.Millis(q.To))
	}
	query := `SELECT ` + ledgerColumns + ` FROM budget_ledger`
	if len(conds) > 0 {
		query += ` WHERE ` + strings.Join(conds, ` AND `)
	}
	query += ` ORDER BY settled_at DESC, id DESC`
	if q.Limit > 0 {
		query += fmt.Sprintf(` LIMIT %d`, q.Limit)
	}
	rows, err := s.reader.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: read ledger: %w", err)
	}
	es, err := collect(rows, scanEntry)
	if err != nil {
		return nil, fmt.Errorf("sqlite: read ledger: %w", err)
	}
	return es, nil
}

func scanEntry(r scanner) (budget.Entry, error) {
	var (
		e                budget.Entry
		cost, reserved   int64
		started, settled int64
	)
	err := r.Scan(&e.ID, &e.Tenant, &e.Env, &e.User, &e.Conversation, &e.Model, &e.Status, &e.Streamed, &e.Estimated,
		&e.InputTokens, &e.OutputTokens, &e.CacheWrite5mTokens, &e.CacheWrite1hTokens, &e.CacheReadTokens,
		&e.WebSearchRequests, &e.WebFetchRequests, &cost, &reserved, &e.RequestBytes, &started, &settled)
	e.Cost, e.Reserved = budget.Money(cost), budget.Money(reserved)
	e.StartedAt, e.SettledAt = sqlcore.FromMillis(started), sqlcore.FromMillis(settled)
	return e, err
}
