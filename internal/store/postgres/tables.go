package postgres

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/talkide/platform/internal/store/sqlcore"
)

// The CRUD tables are sqlcore's; this file gives it PostgreSQL's dialect and
// the Store's pool.

// tables lets Store embed *sqlcore.Tables, whose methods implement most of
// store.Store, without exporting the field.
type tables = sqlcore.Tables

var dialect = sqlcore.Dialect{
	Name:   "postgres",
	NoRows: pgx.ErrNoRows,
	// By SQLSTATE: foreign_key_violation, unique_violation.
	Violation: sqlcore.ViolationOf(func(e *pgconn.PgError) string { return e.Code }, map[string]sqlcore.Violation{
		"23503": sqlcore.ForeignKey,
		"23505": sqlcore.Unique,
	}),
	ByBytes: ` COLLATE "C"`,
	LockRow: ` FOR UPDATE`,
	// One array parameter, so one text for any number of values.
	AnyOf: func(col string, vals []string) (string, []any) {
		return col + ` = ANY($1)`, []any{vals}
	},
	// search is the body's tsvector, a generated column with a GIN index.
	// ts_rank is higher for a better match.
	Search: sqlcore.Search{
		Hits: `SELECT t.conversation_id, t.kind, t.body, ts_rank(t.search, to_tsquery('simple', $2))::float8 AS score,
		ROW_NUMBER() OVER (PARTITION BY t.conversation_id
			ORDER BY ts_rank(t.search, to_tsquery('simple', $2)) DESC, t.at DESC, t.key COLLATE "C" DESC) AS n
	FROM conversation_texts t
	JOIN conversations c ON c.id = t.conversation_id
	WHERE c.user_id = $1 AND t.search @@ to_tsquery('simple', $2)`,
		Match: tsQuery,
	},
}

// tsQuery writes search terms as a tsquery: each a quoted lexeme (the
// terms hold no quote or backslash; doubled anyway), all of them required,
// the last a prefix.
func tsQuery(terms []string) string {
	q := make([]string, len(terms))
	for i, t := range terms {
		q[i] = "'" + strings.NewReplacer(`'`, `''`, `\`, `\\`).Replace(t) + "'"
	}
	return strings.Join(q, " & ") + ":*"
}

// querier is a *pgxpool.Pool or a pgx.Tx.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// conn is a sqlcore.Tx on q (or a sqlcore.Conn, on the pool). pgx prepares
// each text once per connection and keeps it.
type conn struct{ q querier }

func (c conn) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := c.q.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (c conn) QueryRow(ctx context.Context, query string, args ...any) sqlcore.Row {
	return c.q.QueryRow(ctx, query, args...)
}

func (c conn) Query(ctx context.Context, query string, args ...any) (sqlcore.Rows, error) {
	return c.q.Query(ctx, query, args...)
}

// ExecEach sends the runs as one pgx.Batch: one round trip.
func (c conn) ExecEach(ctx context.Context, query string, args [][]any) ([]int64, error) {
	b := &pgx.Batch{}
	for _, a := range args {
		b.Queue(query, a...)
	}
	res := c.q.SendBatch(ctx, b)
	n := make([]int64, 0, len(args))
	for range args {
		tag, err := res.Exec()
		if err != nil {
			res.Close()
			return n, err
		}
		n = append(n, tag.RowsAffected())
	}
	return n, res.Close()
}

// poolDB is the Store's pool, the sqlcore.DB of its tables.
type poolDB struct {
	conn
	s *Store
}

func (p poolDB) InTx(ctx context.Context, f func(sqlcore.Tx) error) error {
	return p.s.tx(ctx, func(tx pgx.Tx) error { return f(conn{tx}) })
}
