// Package postgres is the production store.Store: PostgreSQL through pgx, the
// schema from store/migrations, shared by every control-plane replica.
package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/sqlcore"
)

// Options configures Open. A nil *Options is the zero Options.
type Options struct {
	// Logger receives the store's few log lines (migrations applied). Nil
	// means don't log.
	Logger *slog.Logger
}

// Store is a store.Store in one PostgreSQL database (in the first schema of
// the connection's search_path).
//
// It talks to the server through a pgxpool.Pool rather than database/sql
// over pgx/v5/stdlib: the gateway's budget path has a sub-millisecond
// budget, and pgx's native interface saves database/sql's per-call
// allocations and reflection, caches prepared statements per connection,
// speaks the binary protocol, and sends a batch in one round trip
// (conn.ExecEach, for AddReports and RecordUsages). Nothing here needs database/sql's portability: what the
// two stores share, sqlcore, runs on a small interface of its own.
//
// The pool is safe for concurrent use; transactions run at READ COMMITTED,
// which together with ON CONFLICT gives the idempotent inserts the store
// promises.
//
// The CRUD tables' methods are sqlcore's, on the pool (see tables.go); the
// budget's are in budget.go.
type Store struct {
	*tables

	pool *pgxpool.Pool
	log  *slog.Logger
}

var _ store.Store = (*Store)(nil)

// DefaultMaxConns is the pool's size unless dsn sets pool_max_conns.
// pgxpool's own default (4 on this 2-core machine) made the gateway's
// store calls queue for a connection at 256 concurrent streams
// (bench/gateway); what the control-plane runs at once is mostly
// short, and PostgreSQL's default max_connections (100) leaves room for
// several replicas of 16.
const DefaultMaxConns = 16

// Open connects to the database named by dsn, a postgres:// URL or a
// keyword/value string as libpq takes them (the PG* environment variables
// and ~/.pgpass fill in what it leaves out), checks that it can connect, and
// applies the migrations the database lacks. Pool settings such as
// pool_max_conns may be given in dsn, as pgxpool.ParseConfig documents.
//
// Errors never contain the password.
func Open(ctx context.Context, dsn string, opts *Options) (*Store, error) {
	o := defaults.Copy(opts)
	defaults.Logger(&o.Logger)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = DefaultMaxConns
	}
	where := fmt.Sprintf("%s@%s:%d/%s", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open %s: %w", where, err)
	}
	// The pool connects lazily: find out now whether the database is there.
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: open %s: %w", where, err)
	}
	s := &Store{pool: pool, log: o.Logger}
	s.tables = sqlcore.New(poolDB{conn{pool}, s}, dialect)
	if err := migrate(ctx, pool, s.log); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: open %s: %w", where, err)
	}
	return s, nil
}

// Close closes every connection, waiting for those in use to be returned.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// readCommitted is the isolation level of every transaction, set explicitly
// so that a server or role default of REPEATABLE READ or SERIALIZABLE cannot
// change the store's semantics: each statement sees what committed before it,
// and ON CONFLICT waits for a concurrent insert of the same key and then
// yields to it instead of failing with a serialization error.
var readCommitted = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// tx runs f in a transaction and commits it when f returns nil.
func (s *Store) tx(ctx context.Context, f func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, readCommitted, f)
}

// collect scans every row with scan and closes rows.
func collect[T any](rows pgx.Rows, scan func(sqlcore.Row) (T, error)) ([]T, error) {
	defer rows.Close()
	return sqlcore.Collect(rows, scan)
}
