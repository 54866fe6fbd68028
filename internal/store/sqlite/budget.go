package sqlite

import (
	"context"
	"database/sql"
	"fmt"
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
			if _, err := st.exec(sqlcore.UpsertBucket, sub.Scope, sub.ID, budget.BucketMinute, minute, 0, 0, 1); err != nil {
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

func loadSnapshot(st *txStmts, id string, q budget.SnapshotQuery) (*budget.Snapshot, error) {
	snap := &budget.Snapshot{Held: make(map[budget.Subject]budget.Held, len(q.Subjects))}
	now := sqlcore.Millis(q.Now)
	for _, sub := range q.Subjects {
		rows, err := st.query(`SELECT bucket, period_start, cost, tokens, requests FROM budget_usage
			WHERE scope = ? AND subject = ? AND (
				(bucket = 'day' AND period_start >= ?) OR
				(bucket = '5m' AND period_start >= ?) OR
				(bucket = 'minute' AND period_start >= ?))`,
			sub.Scope, sub.ID, sqlcore.Since(q.DaysFrom), sqlcore.Since(q.FiveMinFrom), sqlcore.Since(q.MinuteFrom))
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

		where, args := sqlcore.HeldWhere(sub, 3)
		var h budget.Held
		var cost int64
		row, err := st.queryRow(`SELECT COALESCE(SUM(cost), 0), COALESCE(SUM(tokens), 0), COALESCE(SUM(calls), 0)
			FROM budget_reservations WHERE expires_at > $1 AND id <> $2 AND `+where,
			append([]any{now, id}, args...)...)
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

// SettleBudget implements budget.Store.
func (s *Store) SettleBudget(ctx context.Context, e budget.Entry) (applied bool, err error) {
	return sqlcore.SettleOne(ctx, s.SettleBudgetBatch, e)
}

// SettleBudgetBatch implements budget.Store.
func (s *Store) SettleBudgetBatch(ctx context.Context, es []budget.Entry, lease *budget.SliceSize) ([]bool, error) {
	applied := make([]bool, len(es))
	err := s.tx(ctx, func(tx *sql.Tx) error {
		st := s.stmts(ctx, tx)
		for i, e := range es {
			res, err := st.exec(sqlcore.InsertLedger, sqlcore.LedgerArgs(e)...)
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
			_, err := st.exec(sqlcore.UpsertBucket, b.Subject.Scope, b.Subject.ID, b.Size, sqlcore.Millis(b.Start), int64(b.Cost), b.Tokens, b.Requests)
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

// BudgetLimits implements budget.Store: SQLite has no arrays, so the
// subjects are a list of conditions.
func (s *Store) BudgetLimits(ctx context.Context, subjects ...budget.Subject) ([]budget.Limit, error) {
	conds := make([]string, len(subjects))
	var args []any
	for i, sub := range subjects {
		conds[i] = fmt.Sprintf(`(scope = $%d AND subject = $%d)`, 2*i+1, 2*i+2)
		args = append(args, string(sub.Scope), sub.ID)
	}
	return s.LimitsWhere(ctx, strings.Join(conds, ` OR `), args...)
}
