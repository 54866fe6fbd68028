package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/store/sqlcore"
)

// The budget's tables (migration 0003_budgets.sql).
//
// An admission must decide on a view that no other admission of the same
// subjects can change before it commits, across every replica. Each one
// takes a transaction-scoped advisory lock per subject (in the order of the
// lock keys, so two admissions never wait for each other in a cycle), then
// reads its whole snapshot in one statement: at READ COMMITTED a statement
// sees everything committed before it started, including the reservation
// of the admission that held the lock before, and a settlement either
// wholly or not at all. Settlements take no lock: one commits a ledger row,
// its buckets and the deletion of its reservation together, and an
// admission sees all of that or none of it. Begin, lock and snapshot (one
// batch), reservation, commit: four round trips.

var _ budget.Store = (*Store)(nil)

// budgetLockKey is the advisory lock of a subject: 64 bits of FNV-1a. Two
// subjects that collide share a lock, which costs waiting, never
// correctness.
func budgetLockKey(s budget.Subject) int64 {
	h := fnv.New64a()
	h.Write([]byte("talkide.budget\x00" + string(s.Scope) + "\x00" + s.ID))
	return int64(h.Sum64())
}

// retryable reports whether a transaction failed only because PostgreSQL
// broke a deadlock or a serialization conflict: running it again is safe.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// budgetTx runs f in a transaction, again when it failed only because of a
// deadlock.
func (s *Store) budgetTx(ctx context.Context, f func(pgx.Tx) error) error {
	for attempt := 0; ; attempt++ {
		err := s.tx(ctx, f)
		if err == nil || !retryable(err) || attempt == 4 {
			return err
		}
	}
}

// ReserveBudget implements budget.Store.
func (s *Store) ReserveBudget(ctx context.Context, in budget.Reservation, q budget.SnapshotQuery, admit func(*budget.Snapshot, *budget.Reservation) error) error {
	var denied error
	err := s.budgetTx(ctx, func(tx pgx.Tx) error {
		denied = nil
		r := in
		keys := make([]int64, len(q.Subjects))
		for i, sub := range q.Subjects {
			keys[i] = budgetLockKey(sub)
		}
		slices.Sort(keys)
		keys = slices.Compact(keys)
		b := &pgx.Batch{}
		for _, k := range keys {
			b.Queue(`SELECT pg_advisory_xact_lock($1)`, k)
		}
		query, args := snapshotQuery(r.ID, q)
		b.Queue(query, args...)
		res := tx.SendBatch(ctx, b)
		for range keys {
			if _, err := res.Exec(); err != nil {
				res.Close()
				return fmt.Errorf("lock: %w", err)
			}
		}
		rows, err := res.Query()
		if err != nil {
			res.Close()
			return err
		}
		snap, err := scanSnapshot(rows, r.ID, q)
		if err != nil {
			res.Close()
			return err
		}
		if err := res.Close(); err != nil {
			return err
		}
		if denied = admit(snap, &r); denied != nil {
			return denied
		}
		b = &pgx.Batch{}
		b.Queue(`INSERT INTO budget_reservations
			(id, user_id, tenant, env, cost, tokens, created_at, expires_at, calls) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (id) DO UPDATE SET cost = excluded.cost, tokens = excluded.tokens, expires_at = excluded.expires_at`,
			r.ID, r.User, r.Tenant, r.Env, int64(r.Cost), r.Tokens, sqlcore.Millis(r.CreatedAt), sqlcore.Millis(r.ExpiresAt), r.Calls())
		if !snap.Exists {
			minute := sqlcore.Millis(budget.BucketMinute.Start(r.CreatedAt))
			for _, sub := range q.Subjects {
				b.Queue(sqlcore.UpsertBucket, string(sub.Scope), sub.ID, string(budget.BucketMinute), minute, int64(0), int64(0), int64(1))
			}
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil && err == denied {
		return err
	}
	if err != nil {
		return fmt.Errorf("postgres: reserve budget %s: %w", in.ID, err)
	}
	return nil
}

// snapshotQuery is the one statement that reads a snapshot. Every row has
// the same eight columns; the first says what the row is: 'b' a bucket,
// 'h' what a subject's other live reservations hold (one row per subject,
// in the order of q.Subjects), 'o' the reservation with the admitted id.
func snapshotQuery(id string, q budget.SnapshotQuery) (string, []any) {
	scopes := make([]string, len(q.Subjects))
	ids := make([]string, len(q.Subjects))
	for i, sub := range q.Subjects {
		scopes[i], ids[i] = string(sub.Scope), sub.ID
	}
	args := []any{scopes, ids, sqlcore.Since(q.DaysFrom), sqlcore.Since(q.FiveMinFrom), sqlcore.Since(q.MinuteFrom), sqlcore.Millis(q.Now), id}
	var b strings.Builder
	b.WriteString(`SELECT 'b'::text, scope, subject, bucket, period_start, cost, tokens, requests FROM budget_usage
		WHERE (scope, subject) IN (SELECT * FROM unnest($1::text[], $2::text[]))
		AND ((bucket = 'day' AND period_start >= $3) OR (bucket = '5m' AND period_start >= $4) OR (bucket = 'minute' AND period_start >= $5))`)
	for i, sub := range q.Subjects {
		where, more := sqlcore.HeldWhere(sub, len(args)+1)
		args = append(args, more...)
		fmt.Fprintf(&b, `
		UNION ALL SELECT 'h', $%d::text, '', '', %d::bigint, COALESCE(SUM(cost), 0)::bigint, COALESCE(SUM(tokens), 0)::bigint, COALESCE(SUM(calls), 0)::bigint
		FROM budget_reservations WHERE %s AND expires_at > $6 AND id <> $7`, len(args)+1, i, where)
		args = append(args, sub.ID)
	}
	b.WriteString(`
		UNION ALL SELECT 'o', user_id, tenant, env, expires_at, cost, tokens, created_at FROM budget_reservations WHERE id = $7`)
	return b.String(), args
}

func scanSnapshot(rows pgx.Rows, id string, q budget.SnapshotQuery) (*budget.Snapshot, error) {
	defer rows.Close()
	snap := &budget.Snapshot{Held: make(map[budget.Subject]budget.Held, len(q.Subjects))}
	for rows.Next() {
		var (
			kind, a, b, c string
			n, cost, x, y int64
		)
		if err := rows.Scan(&kind, &a, &b, &c, &n, &cost, &x, &y); err != nil {
			return nil, err
		}
		switch kind {
		case "b":
			snap.Buckets = append(snap.Buckets, budget.Bucket{
				Subject: budget.Subject{Scope: budget.Scope(a), ID: b}, Size: budget.BucketSize(c),
				Start: sqlcore.FromMillis(n), Cost: budget.Money(cost), Tokens: x, Requests: y,
			})
		case "h":
			snap.Held[q.Subjects[n]] = budget.Held{Cost: budget.Money(cost), Tokens: x, Count: y}
		case "o":
			snap.Exists = true
			if n > sqlcore.Millis(q.Now) {
				snap.Own = &budget.Reservation{ID: id, User: a, Tenant: b, Env: c, Cost: budget.Money(cost), Tokens: x,
					CreatedAt: sqlcore.FromMillis(y), ExpiresAt: sqlcore.FromMillis(n)}
			}
		}
	}
	return snap, rows.Err()
}

// RenewBudget implements budget.Store.
func (s *Store) RenewBudget(ctx context.Context, ids []string, now, expires time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	ids = slices.Sorted(slices.Values(ids))
	_, err := s.pool.Exec(ctx, `UPDATE budget_reservations SET expires_at = GREATEST(expires_at, $1)
		WHERE expires_at > $2 AND id = ANY($3)`, sqlcore.Millis(expires), sqlcore.Millis(now), ids)
	if err != nil {
		return fmt.Errorf("postgres: renew reservations: %w", err)
	}
	return nil
}

// SettleBudget implements budget.Store.
func (s *Store) SettleBudget(ctx context.Context, e budget.Entry) (applied bool, err error) {
	return sqlcore.SettleOne(ctx, s.SettleBudgetBatch, e)
}

// SettleBudgetBatch implements budget.Store: one batch inserts the ledger
// rows and reports which are new, a second adds those to their buckets and
// deletes or resizes reservations. With begin and commit, four round trips
// for any number of entries.
func (s *Store) SettleBudgetBatch(ctx context.Context, es []budget.Entry, lease *budget.SliceSize) ([]bool, error) {
	applied := make([]bool, len(es))
	err := s.budgetTx(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		for _, e := range es {
			b.Queue(sqlcore.InsertLedger, sqlcore.LedgerArgs(e)...)
		}
		if len(es) > 0 {
			res := tx.SendBatch(ctx, b)
			for i := range es {
				tag, err := res.Exec()
				if err != nil {
					res.Close()
					return err
				}
				applied[i] = tag.RowsAffected() == 1
			}
			if err := res.Close(); err != nil {
				return err
			}
		}
		b = &pgx.Batch{}
		for _, k := range budget.SettledBuckets(es, applied) {
			b.Queue(sqlcore.UpsertBucket, string(k.Subject.Scope), k.Subject.ID, string(k.Size), sqlcore.Millis(k.Start),
				int64(k.Cost), k.Tokens, k.Requests)
		}
		switch {
		case lease == nil && len(es) > 0:
			ids := make([]string, len(es))
			for i, e := range es {
				ids[i] = e.ID
			}
			b.Queue(`DELETE FROM budget_reservations WHERE id = ANY($1)`, ids)
		case lease != nil && lease.Cost == 0 && lease.Tokens == 0:
			b.Queue(`DELETE FROM budget_reservations WHERE id = $1`, lease.ID)
		case lease != nil:
			b.Queue(`UPDATE budget_reservations SET cost = $1, tokens = $2 WHERE id = $3`, int64(lease.Cost), lease.Tokens, lease.ID)
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: settle %s: %w", budget.BatchName(es, lease), err)
	}
	return applied, nil
}

// CollectBudget implements budget.Store.
func (s *Store) CollectBudget(ctx context.Context, now time.Time) error {
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM budget_reservations WHERE expires_at < $1`, sqlcore.Millis(now.Add(-time.Hour)))
	b.Queue(`DELETE FROM budget_usage WHERE (bucket = '5m' AND period_start < $1) OR (bucket = 'minute' AND period_start < $2)`,
		sqlcore.Millis(now.Add(-6*time.Hour)), sqlcore.Millis(now.Add(-10*time.Minute)))
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("postgres: collect budget: %w", err)
	}
	return nil
}

// BudgetLimits implements budget.Store: the subjects are two arrays, so
// that the query is one text for any number of them.
func (s *Store) BudgetLimits(ctx context.Context, subjects ...budget.Subject) ([]budget.Limit, error) {
	if len(subjects) == 0 {
		return s.LimitsWhere(ctx, "")
	}
	scopes := make([]string, len(subjects))
	ids := make([]string, len(subjects))
	for i, sub := range subjects {
		scopes[i], ids[i] = string(sub.Scope), sub.ID
	}
	return s.LimitsWhere(ctx, `(scope, subject) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, scopes, ids)
}
