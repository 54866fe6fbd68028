// Package sqlite is the embedded store.Store: one SQLite file (pure Go,
// modernc.org/sqlite), schema from store/migrations, for single-node installs
// and tests.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/sqlcore"
)

// Options configures Open. A nil *Options is the zero Options.
type Options struct {
	// Logger receives the store's few log lines (migrations applied,
	// checkpoints failing or forced). Nil means don't log.
	Logger *slog.Logger
}

// maxReaders bounds the read connections of a file database.
const maxReaders = 4

// busyTimeout is how long a connection waits for another's lock, in
// milliseconds, before it fails with SQLITE_BUSY.
const busyTimeout = 5000

// Store is a store.Store in one SQLite database.
//
// Connections: SQLite allows one writer at a time, so all writes go through
// writer, a pool of exactly one connection. Writers then queue in
// database/sql instead of contending for the file lock, where a deferred
// transaction that upgrades to writing can fail with SQLITE_BUSY without
// waiting out busy_timeout; writer's transactions also BEGIN IMMEDIATE for
// the same reason. Reads go through reader, a small pool of query-only
// connections that WAL lets run beside the writer. An in-memory database
// lives and dies with its one connection, so there reader is writer.
//
// No connection checkpoints the WAL on its own (wal_autocheckpoint=0): for a
// file database ckpt does it in the background, on a third connection (see
// checkpoint.go). The CRUD tables and the budget's hot paths run statements
// prepared once, from writeStmts and readStmts (see stmt.go).
//
// The CRUD tables' methods are sqlcore's, on these connections (see
// tables.go); the budget's are in budget.go.
type Store struct {
	*tables

	writer *sql.DB
	reader *sql.DB
	ckpt   *checkpointer // nil for :memory:, which has no WAL
	log    *slog.Logger

	writeStmts *stmtCache // on writer
	readStmts  *stmtCache // on reader; writeStmts when reader is writer
}

var _ store.Store = (*Store)(nil)

// Open opens the database at path, creating it (and its parent directories,
// mode 0700; the file, mode 0600) when it does not exist, and applies the
// migrations it lacks. The path ":memory:" opens a private in-memory database
// for tests.
func Open(ctx context.Context, path string, opts *Options) (*Store, error) {
	o := defaults.Copy(opts)
	defaults.Logger(&o.Logger)
	if path == "" || strings.ContainsAny(path, "?#") || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("sqlite: open %q: want a file path without '?' or '#', or :memory:", path)
	}
	memory := path == ":memory:"
	if !memory {
		if err := create(path); err != nil {
			return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
		}
	}

	s := &Store{log: o.Logger}
	s.tables = sqlcore.New(newPools(s), dialect)
	var err error
	s.writer, err = openDB(ctx, path, 1, map[string]string{"_txlock": "immediate"})
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := migrate(ctx, s.writer, s.log); err != nil {
		s.writer.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.writeStmts = newStmtCache(s.writer)
	if memory {
		s.reader, s.readStmts = s.writer, s.writeStmts
		return s, nil
	}
	s.reader, err = openDB(ctx, path, maxReaders, map[string]string{"_query_only": "1"})
	if err != nil {
		s.writer.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.readStmts = newStmtCache(s.reader)
	s.ckpt, err = newCheckpointer(ctx, path, s.log)
	if err != nil {
		s.writer.Close()
		s.reader.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.ckpt.start(checkpointInterval)
	return s, nil
}

// create makes path's directories and the empty file with private modes, so
// that SQLite (which gives its -wal and -shm files the mode of the database
// file) never creates anything more open.
func create(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// openDB opens a pool of at most conns connections to path, each set up by
// the DSN parameters: WAL, busy_timeout, foreign keys, synchronous=NORMAL
// (durable across a crash of the process; a power loss may lose the last
// transactions, never corrupt), no automatic checkpoints (the Store's
// checkpointer does them), plus extra, whose values replace these.
func openDB(ctx context.Context, path string, conns int, extra map[string]string) (*sql.DB, error) {
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(busyTimeout))
	q.Set("_journal_mode", "WAL")
	q.Set("_foreign_keys", "1")
	q.Set("_synchronous", "NORMAL")
	// Only a connection that commits a write ever checkpoints
	// automatically, so this matters for the writer; the others get it
	// too so that no connection of the Store does.
	q.Set("_pragma", "wal_autocheckpoint(0)")
	for k, v := range extra {
		q.Set(k, v)
	}
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// Close closes the database. It stops the checkpointer first and checkpoints
// the whole WAL last (see checkpointer.close).
func (s *Store) Close() error {
	if s.ckpt != nil {
		s.ckpt.stop()
	}
	err := s.writeStmts.close()
	if s.readStmts != s.writeStmts {
		err = errors.Join(err, s.readStmts.close())
	}
	err = errors.Join(err, s.writer.Close())
	if s.reader != s.writer {
		err = errors.Join(err, s.reader.Close())
	}
	if s.ckpt != nil {
		err = errors.Join(err, s.ckpt.close())
	}
	if err != nil {
		return fmt.Errorf("sqlite: close: %w", err)
	}
	return nil
}

// tx runs f in a write transaction and commits it when f returns nil. In f,
// take prepared statements from txStmt, never writeStmt (see stmt.go).
func (s *Store) tx(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return err
	}
	err = tx.Commit()
	// The writer's connection is free again: prepare what txStmt could
	// not (only ever the first use of a query).
	s.writeStmts.prepareWanted(ctx)
	return err
}

// scanner is a *sql.Row or *sql.Rows.
type scanner = sqlcore.Row

// collect scans every row with scan and closes rows.
func collect[T any](rows *sql.Rows, scan func(scanner) (T, error)) ([]T, error) {
	defer rows.Close()
	return sqlcore.Collect(sqlRows{rows}, scan)
}
