package sqlite

import (
	"context"
	"database/sql"
	"strconv"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/talkide/platform/internal/store/sqlcore"
)

// The CRUD tables are sqlcore's; this file gives it SQLite's dialect and the
// Store's connections, every statement prepared once (stmt.go).

// tables lets Store embed *sqlcore.Tables, whose methods implement most of
// store.Store, without exporting the field.
type tables = sqlcore.Tables

var dialect = sqlcore.Dialect{
	Name:   "sqlite",
	NoRows: sql.ErrNoRows,
	// By the extended result codes.
	Violation: sqlcore.ViolationOf((*sqlite.Error).Code, map[int]sqlcore.Violation{
		sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY: sqlcore.ForeignKey,
		sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY: sqlcore.Unique,
		sqlite3.SQLITE_CONSTRAINT_UNIQUE:     sqlcore.Unique,
	}),
	AnyOf: anyOf,
}

// anyOf lists vals as parameters of an IN list: SQLite has no arrays. Their
// number is rounded up to a power of two, the last value repeated, so that a
// query of any number of values is one of a few texts, each prepared once,
// not one text per number (sqlcore bounds the number).
func anyOf(col string, vals []string) (string, []any) {
	n := 1
	for n < len(vals) {
		n *= 2
	}
	args := make([]any, n)
	b := make([]byte, 0, len(col)+6+6*n)
	b = append(b, col...)
	b = append(b, " IN ("...)
	for i := range n {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(i+1), 10)
		args[i] = vals[min(i, len(vals)-1)]
	}
	b = append(b, ')')
	return string(b), args
}

// stmtConn runs statements prepared once: reads on the statements of reads,
// writes on those of writes.
type stmtConn struct {
	reads, writes func(ctx context.Context, query string) (*sql.Stmt, error)
}

func (c stmtConn) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	st, err := c.writes(ctx, query)
	if err != nil {
		return 0, err
	}
	return rowsAffected(st.ExecContext(ctx, args...))
}

func (c stmtConn) QueryRow(ctx context.Context, query string, args ...any) sqlcore.Row {
	st, err := c.reads(ctx, query)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(ctx, args...)
}

func (c stmtConn) Query(ctx context.Context, query string, args []any, f func(sqlcore.Rows) error) error {
	st, err := c.reads(ctx, query)
	if err != nil {
		return err
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return f(rows)
}

// pools is the Store's connections outside a transaction, the sqlcore.DB of
// its tables: writes on the writer (writeStmt), reads on the reader pool
// (readStmt).
type pools struct {
	stmtConn
	s *Store
}

func newPools(s *Store) pools {
	return pools{stmtConn{reads: s.readStmt, writes: s.writeStmt}, s}
}

func (p pools) InTx(ctx context.Context, f func(sqlcore.Tx) error) error {
	return p.s.tx(ctx, func(tx *sql.Tx) error {
		st := p.s.stmts(ctx, tx)
		stmt := func(_ context.Context, query string) (*sql.Stmt, error) { return st.stmt(query) }
		return f(txConn{stmtConn{reads: stmt, writes: stmt}})
	})
}

// txConn is one write transaction of s.tx: every statement from txStmts.
type txConn struct{ stmtConn }

// ExecEach runs the statement, prepared once, for each of args: SQLite is in
// this process, so there is no round trip to save.
func (t txConn) ExecEach(ctx context.Context, query string, args [][]any) ([]int64, error) {
	st, err := t.writes(ctx, query)
	if err != nil {
		return nil, err
	}
	n := make([]int64, 0, len(args))
	for _, a := range args {
		k, err := rowsAffected(st.ExecContext(ctx, a...))
		if err != nil {
			return n, err
		}
		n = append(n, k)
	}
	return n, nil
}

func rowsAffected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// errRow is a Row whose query failed before it ran.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
