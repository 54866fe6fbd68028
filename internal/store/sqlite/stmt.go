package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// Prepared statements. The driver compiles the SQL of every db.ExecContext
// or db.QueryContext anew, and compiling was more than a third of SQLite's
// CPU time per gateway call (bench/gateway). A *sql.Stmt compiles its
// query once per connection and keeps it, so the hot paths take theirs from
// these caches, keyed by the query's text. Pass a constant: every distinct
// text stays prepared until Close. A query whose parameters are $1, $2, …
// in order is prepared with them as ? (see positional).
//
// Which to use:
//
//   - readStmt for a query on the reader pool:
//     st, err := s.readStmt(ctx, q); ... st.QueryRowContext(ctx, args...)
//   - writeStmt for a single write outside a transaction (autocommit):
//     st, err := s.writeStmt(ctx, q); ... st.ExecContext(ctx, args...)
//   - txStmt for a statement inside s.tx's function:
//     st, err := s.txStmt(ctx, tx, q); ... st.ExecContext(ctx, args...)
//
// Never call writeStmt (or readStmt of an in-memory database, whose reader
// is the writer) inside s.tx's function: the writer has one connection, the
// transaction holds it, and preparing a query the first time needs it, so
// the call would wait for the transaction, which waits for the call. The
// same goes for using such a statement directly there instead of through
// tx.StmtContext. txStmt exists for that case.
//
// Why tx.StmtContext costs no compiling: database/sql's Tx.StmtContext looks
// through the driver statements the *sql.Stmt has prepared, one per
// connection, and binds the one on the transaction's connection to the
// transaction; only when there is none (a new connection) does it prepare
// the query, and it keeps that one on the *sql.Stmt for next time. The
// transaction's *sql.Stmt is closed with it without closing the shared
// driver statement. TestTxStmtReusesDriverStatement holds database/sql to
// that.

// errStmtCacheClosed is returned for a statement asked of a closed Store.
var errStmtCacheClosed = errors.New("sqlite: store closed")

// stmtCache holds statements prepared on one pool, by query text.
type stmtCache struct {
	db    *sql.DB
	stmts sync.Map // query → *sql.Stmt; written once per query, read on every call

	mu     sync.Mutex          // guards closed and wanted, and orders stores into stmts against close
	closed bool                // close has run: prepare nothing more
	wanted map[string]struct{} // queries txStmt used unprepared, for prepareWanted
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db}
}

// lookup returns query's statement if it is prepared.
func (c *stmtCache) lookup(query string) (*sql.Stmt, bool) {
	st, ok := c.stmts.Load(query)
	if !ok {
		return nil, false
	}
	return st.(*sql.Stmt), true
}

// get returns query's statement, preparing it on a connection of the pool
// the first time: a call that misses waits for a free connection.
func (c *stmtCache) get(ctx context.Context, query string) (*sql.Stmt, error) {
	if st, ok := c.lookup(query); ok {
		return st, nil
	}
	st, err := c.db.PrepareContext(ctx, positional(query))
	if err != nil {
		return nil, err
	}
	return c.store(query, st)
}

// store caches st as query's statement, unless another call got there first
// (then st is closed and the other returned) or the cache is closed.
func (c *stmtCache) store(query string, st *sql.Stmt) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		st.Close()
		return nil, errStmtCacheClosed
	}
	if prev, loaded := c.stmts.LoadOrStore(query, st); loaded {
		st.Close()
		return prev.(*sql.Stmt), nil
	}
	delete(c.wanted, query)
	return st, nil
}

// want notes a query to prepare once the pool's connection is free.
func (c *stmtCache) want(query string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wanted == nil {
		c.wanted = make(map[string]struct{})
	}
	c.wanted[query] = struct{}{}
}

// prepareWanted prepares the queries want noted. A query that fails to
// prepare stays wanted; its transaction prepared it already, so the failure
// is the context's or the connection's, for a later call to retry.
func (c *stmtCache) prepareWanted(ctx context.Context) {
	c.mu.Lock()
	var qs []string
	for q := range c.wanted {
		qs = append(qs, q)
	}
	c.mu.Unlock()
	for _, q := range qs {
		if _, err := c.get(ctx, q); err != nil {
			return
		}
	}
}

// close closes the statements; a statement asked for afterwards is an error.
func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	c.stmts.Range(func(_, st any) bool {
		errs = append(errs, st.(*sql.Stmt).Close())
		return true
	})
	return errors.Join(errs...)
}

// readStmt returns query prepared on the reader pool, for running on its
// own: st.QueryContext or st.QueryRowContext. The statement belongs to the
// Store, which closes it; do not Close it.
func (s *Store) readStmt(ctx context.Context, query string) (*sql.Stmt, error) {
	return s.readStmts.get(ctx, query)
}

// writeStmt returns query prepared on the writer, for running on its own
// (one statement, one transaction): st.ExecContext. The statement belongs to
// the Store, which closes it; do not Close it.
//
// Not inside s.tx's function, where the first call for a query would wait
// forever for the writer's one connection: use txStmt there.
func (s *Store) writeStmt(ctx context.Context, query string) (*sql.Stmt, error) {
	return s.writeStmts.get(ctx, query)
}

// txStmt returns query as a statement of tx, a transaction of the writer
// (s.tx's). Once query is prepared on the writer this is tx.StmtContext,
// which runs the statement already compiled on the transaction's connection;
// before, it prepares query for tx alone and s.tx prepares it on the writer
// after the transaction, when the connection is free again. The statement
// is closed with tx; do not Close it.
func (s *Store) txStmt(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	if st, ok := s.writeStmts.lookup(query); ok {
		return tx.StmtContext(ctx, st), nil
	}
	s.writeStmts.want(query)
	return tx.PrepareContext(ctx, positional(query))
}

// txStmts hands out the statements of one transaction of s.tx, each taken
// from the cache (txStmt) once per transaction however often it runs.
type txStmts struct {
	s   *Store
	ctx context.Context
	tx  *sql.Tx
	got map[string]*sql.Stmt
}

func (s *Store) stmts(ctx context.Context, tx *sql.Tx) *txStmts {
	return &txStmts{s: s, ctx: ctx, tx: tx, got: map[string]*sql.Stmt{}}
}

func (t *txStmts) stmt(query string) (*sql.Stmt, error) {
	if st, ok := t.got[query]; ok {
		return st, nil
	}
	st, err := t.s.txStmt(t.ctx, t.tx, query)
	if err != nil {
		return nil, err
	}
	t.got[query] = st
	return st, nil
}

func (t *txStmts) exec(query string, args ...any) (sql.Result, error) {
	st, err := t.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(t.ctx, args...)
}

func (t *txStmts) query(query string, args ...any) (*sql.Rows, error) {
	st, err := t.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(t.ctx, args...)
}

func (t *txStmts) queryRow(query string, args ...any) (*sql.Row, error) {
	st, err := t.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.QueryRowContext(t.ctx, args...), nil
}
