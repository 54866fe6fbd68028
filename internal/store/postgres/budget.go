package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
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
				b.Queue(upsertBucket, string(sub.Scope), sub.ID, string(budget.BucketMinute), minute, int64(0), int64(0), int64(1))
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

// upsertBucket adds to a usage bucket.
const upsertBucket = `INSERT INTO budget_usage (scope, subject, bucket, period_start, cost, tokens, requests)
	VALUES ($1, $2, $3, $4, $5, $6, $7)
	ON CONFLICT (scope, subject, bucket, period_start) DO UPDATE SET
		cost = budget_usage.cost + excluded.cost,
		tokens = budget_usage.tokens + excluded.tokens,
		requests = budget_usage.requests + excluded.requests`

// since is a time the query may leave zero: then no rows.
func since(t time.Time) int64 {
	if t.IsZero() {
		return math.MaxInt64
	}
	return sqlcore.Millis(t)
}

// heldWhere selects the reservations of a subject, with its parameters
// numbered from n.
func heldWhere(sub budget.Subject, n int) (string, []any) {
	switch sub.Scope {
	case budget.ScopeUser:
		return fmt.Sprintf(`user_id = $%d`, n), []any{sub.ID}
	case budget.ScopeTenant:
		return fmt.Sprintf(`tenant = $%d`, n), []any{sub.ID}
	}
	t, e, _ := strings.Cut(sub.ID, "/")
	return fmt.Sprintf(`tenant = $%d AND env = $%d`, n, n+1), []any{t, e}
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
	args := []any{scopes, ids, since(q.DaysFrom), since(q.FiveMinFrom), since(q.MinuteFrom), sqlcore.Millis(q.Now), id}
	var b strings.Builder
	b.WriteString(`SELECT 'b'::text, scope, subject, bucket, period_start, cost, tokens, requests FROM budget_usage
		WHERE (scope, subject) IN (SELECT * FROM unnest($1::text[], $2::text[]))
		AND ((bucket = 'day' AND period_start >= $3) OR (bucket = '5m' AND period_start >= $4) OR (bucket = 'minute' AND period_start >= $5))`)
	for i, sub := range q.Subjects {
		where, more := heldWhere(sub, len(args)+1)
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

// SettleBudgetBatch implements budget.Store: one batch inserts the ledger
// rows and reports which are new, a second adds those to their buckets and
// deletes or resizes reservations. With begin and commit, four round trips
// for any number of entries.
func (s *Store) SettleBudgetBatch(ctx context.Context, es []budget.Entry, lease *budget.SliceSize) ([]bool, error) {
	applied := make([]bool, len(es))
	err := s.budgetTx(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		for _, e := range es {
			b.Queue(`INSERT INTO budget_ledger (`+ledgerColumns+`)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)
				ON CONFLICT (id) DO NOTHING`,
				e.ID, e.Tenant, e.Env, e.User, e.Conversation, e.Model, int64(e.Status), e.Streamed, e.Estimated,
				e.InputTokens, e.OutputTokens, e.CacheWrite5mTokens, e.CacheWrite1hTokens, e.CacheReadTokens,
				e.WebSearchRequests, e.WebFetchRequests, int64(e.Cost), int64(e.Reserved), e.RequestBytes,
				sqlcore.Millis(e.StartedAt), sqlcore.Millis(e.SettledAt))
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
			b.Queue(upsertBucket, string(k.Subject.Scope), k.Subject.ID, string(k.Size), sqlcore.Millis(k.Start),
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

// PutBudgetLimit implements budget.Store.
func (s *Store) PutBudgetLimit(ctx context.Context, l budget.Limit) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO budget_limits (scope, subject, kind, maximum, hard, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (scope, subject, kind) DO UPDATE SET
			maximum = excluded.maximum, hard = excluded.hard, updated_at = excluded.updated_at`,
		string(l.Subject.Scope), l.Subject.ID, string(l.Kind), l.Max, l.Hard, sqlcore.Millis(l.UpdatedAt))
	if err != nil {
		return fmt.Errorf("postgres: put limit %s %s: %w", l.Subject, l.Kind, err)
	}
	return nil
}

// DeleteBudgetLimit implements budget.Store.
func (s *Store) DeleteBudgetLimit(ctx context.Context, sub budget.Subject, k budget.Kind) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM budget_limits WHERE scope = $1 AND subject = $2 AND kind = $3`,
		string(sub.Scope), sub.ID, string(k))
	if err != nil {
		return fmt.Errorf("postgres: delete limit %s %s: %w", sub, k, err)
	}
	return nil
}

// BudgetLimits implements budget.Store, ordered by bytes.
func (s *Store) BudgetLimits(ctx context.Context, subjects ...budget.Subject) ([]budget.Limit, error) {
	query := `SELECT scope, subject, kind, maximum, hard, updated_at FROM budget_limits`
	var args []any
	if len(subjects) > 0 {
		scopes := make([]string, len(subjects))
		ids := make([]string, len(subjects))
		for i, sub := range subjects {
			scopes[i], ids[i] = string(sub.Scope), sub.ID
		}
		query += ` WHERE (scope, subject) IN (SELECT * FROM unnest($1::text[], $2::text[]))`
		args = []any{scopes, ids}
	}
	rows, err := s.pool.Query(ctx, query+` ORDER BY scope COLLATE "C", subject COLLATE "C", kind COLLATE "C"`, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: read limits: %w", err)
	}
	ls, err := collect(rows, func(r sqlcore.Row) (budget.Limit, error) {
		var (
			l           budget.Limit
			scope, kind string
			updated     int64
		)
		err := r.Scan(&scope, &l.Subject.ID, &kind, &l.Max, &l.Hard, &updated)
		l.Subject.Scope, l.Kind, l.UpdatedAt = budget.Scope(scope), budget.Kind(kind), sqlcore.FromMillis(updated)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: read limits: %w", err)
	}
	return ls, nil
}

// BudgetUsage implements budget.Store.
func (s *Store) BudgetUsage(ctx context.Context, sub budget.Subject, size budget.BucketSize, from, to time.Time) ([]budget.Bucket, error) {
	rows, err := s.pool.Query(ctx, `SELECT period_start, cost, tokens, requests FROM budget_usage
		WHERE scope = $1 AND subject = $2 AND bucket = $3 AND period_start >= $4 AND period_start < $5
		ORDER BY period_start`, string(sub.Scope), sub.ID, string(size), sqlcore.Millis(from), sqlcore.Millis(to))
	if err != nil {
		return nil, fmt.Errorf("postgres: read usage of %s: %w", sub, err)
	}
	bs, err := collect(rows, func(r sqlcore.Row) (budget.Bucket, error) {
		b := budget.Bucket{Subject: sub, Size: size}
		var start, cost int64
		err := r.Scan(&start, &cost, &b.Tokens, &b.Requests)
		b.Start, b.Cost = sqlcore.FromMillis(start), budget.Money(cost)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: read usage of %s: %w", sub, err)
	}
	return bs, nil
}

// BudgetHeld implements budget.Store.
func (s *Store) BudgetHeld(ctx context.Context, sub budget.Subject, now time.Time) (budget.Held, error) {
	where, args := heldWhere(sub, 2)
	var (
		h    budget.Held
		cost int64
	)
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(SUM(cost), 0)::bigint, COALESCE(SUM(tokens), 0)::bigint, COALESCE(SUM(calls), 0)::bigint
		FROM budget_reservations WHERE expires_at > $1 AND `+where, append([]any{sqlcore.Millis(now)}, args...)...).
		Scan(&cost, &h.Tokens, &h.Count)
	if err != nil {
		return budget.Held{}, fmt.Errorf("postgres: read reservations of %s: %w", sub, err)
	}
	h.Cost = budget.Money(cost)
	return h, nil
}

// BudgetLedger implements budget.Store, ids ordered by bytes.
func (s *Store) BudgetLedger(ctx context.Context, q budget.LedgerQuery) ([]budget.Entry, error) {
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
		add(`settled_at >= $%d`, sqlcore.Millis(q.From))
	}
	if !q.To.IsZero() {
		add(`settled_at < $%d`, sqlcore.Millis(q.To))
	}
	query := `SELECT ` + ledgerColumns + ` FROM budget_ledger`
	if len(conds) > 0 {
		query += ` WHERE ` + strings.Join(conds, ` AND `)
	}
	query += ` ORDER BY settled_at DESC, id COLLATE "C" DESC`
	if q.Limit > 0 {
		query += fmt.Sprintf(` LIMIT %d`, q.Limit)
	}
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: read ledger: %w", err)
	}
	es, err := collect(rows, func(r sqlcore.Row) (budget.Entry, error) {
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
		e.StartedAt, e.SettledAt = sqlcore.FromMillis(started), sqlcore.FromMillis(settled)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: read ledger: %w", err)
	}
	return es, nil
}
