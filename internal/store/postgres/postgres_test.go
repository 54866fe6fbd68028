package postgres

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/migrations"
	"github.com/talkide/platform/internal/store/postgres/pgtest"
	"github.com/talkide/platform/internal/store/storetest"
)

func open(t *testing.T, dsn string) *Store { return storetest.Open(t, Open, dsn) }

// schema is the database at dsn for storetest's migration tests.
func schema(t *testing.T, dsn string) storetest.Schema[*Store] {
	return storetest.Schema[*Store]{
		Open:     func(logger *slog.Logger) (*Store, error) { return Open(t.Context(), dsn, &Options{Logger: logger}) },
		Versions: schemaVersions,
		Exec: func(t *testing.T, s *Store, query string) {
			if _, err := s.pool.Exec(t.Context(), query); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, pgtest.URL(t))
	})
}

// schemaVersions returns schema_migrations as version → applied_at.
func schemaVersions(t *testing.T, s *Store) map[int]int64 {
	t.Helper()
	rows, err := s.pool.Query(t.Context(), `SELECT version, applied_at FROM schema_migrations`)
	if err != nil {
		t.Fatal(err)
	}
	vs := map[int]int64{}
	var (
		v  int
		at int64
	)
	_, err = pgx.ForEachRow(rows, []any{&v, &at}, func() error {
		vs[v] = at
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func TestMigrationsAppliedOnce(t *testing.T) {
	storetest.MigrationsAppliedOnce(t, schema(t, pgtest.URL(t)))
}

// TestConcurrentOpen opens one fresh schema from several stores at once, as
// control-plane replicas starting together do: every Open succeeds and each
// migration is applied once. To make the race certain rather than likely,
// the test holds the migration lock until every Open is waiting for it.
func TestConcurrentOpen(t *testing.T) {
	const n = 4
	ms, err := migrations.Files(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	dsn := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	holder, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	var key int64
	if err := holder.QueryRow(ctx, `SELECT `+migrationLockKey).Scan(&key); err != nil {
		t.Fatal(err)
	}
	lock, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(context.Background())
	if _, err := lock.Exec(ctx, lockMigrations); err != nil {
		t.Fatal(err)
	}

	type result struct {
		s    *Store
		err  error
		logs string
	}
	results := make(chan result, n)
	for range n {
		go func() {
			var logs bytes.Buffer
			s, err := Open(ctx, dsn, &Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			results <- result{s, err, logs.String()}
		}()
	}

	// Wait until all n wait for the lock. A bigint advisory key shows in
	// pg_locks split into classid (high half) and objid (low half).
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for waiting := 0; waiting < n; {
		select {
		case r := <-results:
			t.Fatalf("an Open returned while the migration lock was held: %v", r.err)
		case <-ctx.Done():
			t.Fatalf("%d of %d Opens waiting for the migration lock: %v", waiting, n, ctx.Err())
		case <-tick.C:
		}
		err := holder.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND ((classid::bigint << 32) | objid::bigint) = $1`, key).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := lock.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	applied := 0
	var s *Store
	for range n {
		r := <-results
		if r.err != nil {
			t.Errorf("Open: %v", r.err)
			continue
		}
		defer r.s.Close()
		s = r.s
		applied += strings.Count(r.logs, "applied migration")
	}
	if t.Failed() {
		return
	}
	if applied != len(ms) {
		t.Errorf("%d concurrent Opens applied %d migrations, want %d", n, applied, len(ms))
	}
	if got := schemaVersions(t, s); len(got) != len(ms) {
		t.Errorf("schema_migrations has %d rows, want %d", len(got), len(ms))
	}
	// And the schema works.
	if err := s.PutUser(ctx, store.User{ID: "u1", Name: "Ada"}); err != nil {
		t.Errorf("PutUser: %v", err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	storetest.NewerSchemaRefused(t, schema(t, pgtest.URL(t)))
}

func TestOpenWithoutSchema(t *testing.T) {
	dsn := pgtest.URL(t)
	// A search_path naming only schemas that do not exist leaves nowhere to
	// create the tables.
	dsn = strings.Replace(dsn, "search_path=", "search_path=nope_", 1)
	s, err := Open(t.Context(), dsn, nil)
	if err == nil {
		s.Close()
		t.Fatal("Open: no error")
	}
	if !strings.Contains(err.Error(), "no schema") {
		t.Errorf("Open: %v, want it to say there is no schema", err)
	}
}

// TestOpenErrorsHidePassword needs no database: nothing listens on port 1.
func TestOpenErrorsHidePassword(t *testing.T) {
	const password = "s3cr3t-pw"
	for _, dsn := range []string{
		"postgres://talkide:" + password + "@127.0.0.1:1/talkide?connect_timeout=5",
		"host=127.0.0.1 port=1 user=talkide password=" + password + " dbname=talkide connect_timeout=5",
		"postgres://talkide:" + password + "@127.0.0.1:1/talkide?sslmode=bogus",
	} {
		s, err := Open(t.Context(), dsn, nil)
		if err == nil {
			s.Close()
			t.Errorf("Open: no error")
			continue
		}
		if strings.Contains(err.Error(), password) {
			t.Errorf("Open error shows the password: %v", err)
		}
	}
}
