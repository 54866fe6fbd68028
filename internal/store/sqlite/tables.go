package sqlite

import (
	"context"
	"database/sql"
	"strconv"
	"strings"

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
	Search: sqlcore.Search{
		// The FTS5 index names a text by its rowid, conversation_texts.id.
		Index:   `INSERT INTO conversation_texts_fts (rowid, body) SELECT id, body FROM conversation_texts WHERE conversation_id = $1 AND key = $2`,
		Unindex: `DELETE FROM conversation_texts_fts WHERE rowid IN (SELECT id FROM conversation_texts WHERE conversation_id = $1 AND key = $2)`,
		// rank is bm25, lower for a better match.
		Hits: `SELECT t.conversation_id, t.kind, t.body, -conversation_texts_fts.rank AS score,
		ROW_NUMBER() OVER (PARTITION BY t.conversation_id ORDER BY conversation_texts_fts.rank, t.at DESC, t.id DESC) AS n
	FROM conversation_texts_fts
	JOIN conversation_texts t ON t.id = conversation_texts_fts.rowid
	JOIN conversations c ON c.id = t.conversation_id
	WHERE c.user_id = $1 AND conversation_texts_fts MATCH $2`,
		Match: ftsMatch,
	},
}

// ftsMatch writes search terms as an FTS5 query: each a quoted string
// (the terms hold no quote), all of them required (FTS5's implicit AND),
// the last a prefix.
func ftsMatch(terms []string) string {
	var b strings.Builder
	for i, t := range terms {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(`"` + strings.ReplaceAll(t, `"`, `""`) + `"`)
	}
	b.WriteByte('*')
	return b.String()
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

// stmtSource prepares statements once: the Store outside a transaction,
// reads on the reader pool and writes on the writer (stmt.go's readStmt and
// writeStmt); inside one, txStmts, both on the transaction.
type stmtSource interface {
	readStmt(ctx context.Context, query string) (*sql.Stmt, error)
	writeStmt(ctx context.Context, query string) (*sql.Stmt, error)
}

// stmtConn is a sqlcore.Conn on src's statements. Its one field is a
// pointer, so it goes into an interface without an allocation.
type stmtConn[S stmtSource] struct{ src S }

func (c stmtConn[S]) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	st, err := c.src.writeStmt(ctx, query)
	if err != nil {
		return 0, err
	}
	return rowsAffected(st.ExecContext(ctx, args...))
}

func (c stmtConn[S]) QueryRow(ctx context.Context, query string, args ...any) sqlcore.Row {
	st, err := c.src.readStmt(ctx, query)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(ctx, args...)
}

func (c stmtConn[S]) Query(ctx context.Context, query string, args ...any) (sqlcore.Rows, error) {
	st, err := c.src.readStmt(ctx, query)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

// pools is the Store's connections outside a transaction: the sqlcore.DB of
// its tables.
type pools struct{ stmtConn[*Store] }

func newPools(s *Store) pools { return pools{stmtConn[*Store]{s}} }

func (p pools) InTx(ctx context.Context, f func(sqlcore.Tx) error) error {
	s := p.src
	return s.tx(ctx, func(tx *sql.Tx) error {
		return f(txConn{stmtConn[*txStmts]{s.stmts(ctx, tx)}})
	})
}

// txConn is one write transaction of s.tx.
type txConn struct{ stmtConn[*txStmts] }

// ExecEach runs the statement, prepared once, for each of args: SQLite is in
// this process, so there is no round trip to save.
func (t txConn) ExecEach(ctx context.Context, query string, args [][]any) ([]int64, error) {
	st, err := t.src.stmt(query)
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

// The statements of a transaction, for stmtConn: all on the transaction.
func (t *txStmts) readStmt(_ context.Context, query string) (*sql.Stmt, error)  { return t.stmt(query) }
func (t *txStmts) writeStmt(_ context.Context, query string) (*sql.Stmt, error) { return t.stmt(query) }

func rowsAffected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// sqlRows is a *sql.Rows as a sqlcore.Rows.
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { r.Rows.Close() }

// errRow is a Row whose query failed before it ran.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// positional returns query with its parameters as SQLite's anonymous ?
// when they are $1, $2, … $n, each once and in that order, as most of
// sqlcore's are: the driver binds a ? by position, but asks SQLite the name
// of a $N (a string allocated per argument per run) to find its argument.
// Any other query, a $N named twice say, is returned as it is: the driver
// binds $N to the N-th argument. A query must have no $ but its
// parameters' (sqlcore's have none in a string or a name).
func positional(query string) string {
	var (
		b    []byte
		next = 1 // the parameter expected next
		last = 0 // query[last:] is not in b yet
	)
	for i := 0; i < len(query); i++ {
		if query[i] != '$' {
			continue
		}
		j := i + 1
		for j < len(query) && '0' <= query[j] && query[j] <= '9' {
			j++
		}
		if n, err := strconv.Atoi(query[i+1 : j]); err != nil || n != next {
			return query
		}
		b = append(append(b, query[last:i]...), '?')
		next, last, i = next+1, j, j-1
	}
	if b == nil {
		return query
	}
	return string(append(b, query[last:]...))
}
