package roles

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/postgres"
	"github.com/talkide/platform/internal/store/sqlite"
)

// LoadPrices returns the built-in prices with the operator's overrides from
// the file at path, if any (--prices).
func LoadPrices(path string) (*budget.Prices, error) {
	if path == "" {
		return budget.DefaultPrices(), nil
	}
	return parseFile(path, "--prices", budget.DefaultPrices().Override)
}

// Database is a parsed --database: a PostgreSQL URL or a SQLite file.
type Database struct {
	PostgresURL string
	SQLitePath  string
}

// ParseDatabase reads a --database spec: a postgres:// or postgresql://
// URL is PostgreSQL; sqlite:PATH, sqlite://PATH or a plain file path is
// SQLite; an empty spec is SQLite at defaultPath.
func ParseDatabase(spec, defaultPath string) (Database, error) {
	scheme, rest, isURL := strings.Cut(spec, "://")
	switch {
	case isURL && (strings.EqualFold(scheme, "postgres") || strings.EqualFold(scheme, "postgresql")):
		return Database{PostgresURL: spec}, nil
	case isURL && strings.EqualFold(scheme, "sqlite"):
		return Database{SQLitePath: rest}, nil
	case isURL:
		return Database{}, fmt.Errorf("--database: unknown scheme %q: want postgres://, postgresql://, sqlite:PATH or a file path", scheme)
	case spec == "":
		return Database{SQLitePath: defaultPath}, nil
	}
	return Database{SQLitePath: strings.TrimPrefix(spec, "sqlite:")}, nil
}

// sharedStreamCounts returns st's stream counts when replicas share st
// (PostgreSQL), nil for SQLite, which one process opens: counting there
// would only cost writes.
func sharedStreamCounts(st store.Store) store.StreamCounts {
	if pg, ok := st.(*postgres.Store); ok {
		return pg
	}
	return nil
}

// OpenStore opens the control-plane's store named by spec (ParseDatabase).
func OpenStore(ctx context.Context, spec, defaultPath string, logger *slog.Logger) (store.Store, error) {
	db, err := ParseDatabase(spec, defaultPath)
	if err != nil {
		return nil, err
	}
	if db.PostgresURL != "" {
		return openPostgres(ctx, db.PostgresURL, logger)
	}
	return sqlite.Open(ctx, db.SQLitePath, &sqlite.Options{Logger: logger})
}

// dbWait is how long a control-plane waits for PostgreSQL at start.
const dbWait = 2 * time.Minute

// openPostgres opens the store, waiting for the database for up to dbWait
// and saying why at every try: a control-plane started together with its
// database (a cluster coming up, a node restarting both) waits for it
// rather than exiting, which would cost it a crash-loop back-off of
// minutes once the database is there.
func openPostgres(ctx context.Context, url string, logger *slog.Logger) (store.Store, error) {
	wctx, cancel := context.WithTimeout(ctx, dbWait)
	defer cancel()
	b := backoff.New(backoff.Policy{Base: 250 * time.Millisecond, Max: 5 * time.Second})
	for {
		st, err := postgres.Open(wctx, url, &postgres.Options{Logger: logger})
		if err == nil {
			return st, nil
		}
		if ctx.Err() != nil || wctx.Err() != nil {
			return nil, err
		}
		d := b.Next()
		logger.Warn("waiting for the database", "err", err, "retry_in", d)
		if backoff.Sleep(wctx, d) != nil {
			return nil, err
		}
	}
}
