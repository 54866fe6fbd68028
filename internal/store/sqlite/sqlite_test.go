package sqlite

import (
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/storetest"
)

func open(t *testing.T, path string) *Store { return storetest.Open(t, Open, path) }

// schema is the database at path for storetest's migration tests.
func schema(t *testing.T, path string) storetest.Schema[*Store] {
	return storetest.Schema[*Store]{
		Open:     func(logger *slog.Logger) (*Store, error) { return Open(t.Context(), path, &Options{Logger: logger}) },
		Versions: schemaVersions,
		Exec: func(t *testing.T, s *Store, query string) {
			if _, err := s.writer.ExecContext(t.Context(), query); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, filepath.Join(t.TempDir(), "talkide.db"))
	})
}

func TestConformanceMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, ":memory:")
	})
}

// schemaVersions returns schema_migrations as version → applied_at.
func schemaVersions(t *testing.T, s *Store) map[int]int64 {
	t.Helper()
	rows, err := s.reader.QueryContext(t.Context(), `SELECT version, applied_at FROM schema_migrations`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	vs := map[int]int64{}
	for rows.Next() {
		var (
			v  int
			at int64
		)
		if err := rows.Scan(&v, &at); err != nil {
			t.Fatal(err)
		}
		vs[v] = at
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return vs
}

func TestMigrationsAppliedOnce(t *testing.T) {
	storetest.MigrationsAppliedOnce(t, schema(t, filepath.Join(t.TempDir(), "talkide.db")))
}

func TestNewerSchemaRefused(t *testing.T) {
	storetest.NewerSchemaRefused(t, schema(t, filepath.Join(t.TempDir(), "talkide.db")))
}

func TestFilePermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "db")
	path := filepath.Join(dir, "talkide.db")
	s := open(t, path)
	// Write something, so the WAL file exists too.
	if err := s.PutUser(t.Context(), store.User{ID: "u1", Name: "Ada"}); err != nil {
		t.Fatal(err)
	}

	tests := map[string]os.FileMode{
		dir:               0o700,
		filepath.Dir(dir): 0o700,
		path:              0o600,
		path + "-wal":     0o600,
		path + "-shm":     0o600,
	}
	for p, want := range tests {
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("Stat: %v", err)
			continue
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("mode of %s = %v, want %v", p, got, want)
		}
	}
}

func TestPersistence(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "talkide.db")
	created := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	want := store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://w:8080", CreatedAt: created}

	s, err := Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutEnv(ctx, want); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, path)
	got, err := s.GetEnv(ctx, "acme", "prod")
	if err != nil {
		t.Fatalf("GetEnv after re-open: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GetEnv after re-open (-want +got):\n%s", diff)
	}
}

func TestPragmas(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "talkide.db"))
	want := map[string]string{
		"journal_mode":       "wal",
		"busy_timeout":       "5000",
		"foreign_keys":       "1",
		"synchronous":        "1", // NORMAL
		"wal_autocheckpoint": "0", // the checkpointer's job
	}
	for pool, db := range map[string]*sql.DB{"writer": s.writer, "reader": s.reader, "checkpointer": s.ckpt.db} {
		for pragma, w := range want {
			if pool == "checkpointer" && pragma == "busy_timeout" {
				w = fmt.Sprint(forcedTimeout)
			}
			var got string
			if err := db.QueryRowContext(t.Context(), "PRAGMA "+pragma).Scan(&got); err != nil {
				t.Fatalf("%s: PRAGMA %s: %v", pool, pragma, err)
			}
			if got != w {
				t.Errorf("%s: PRAGMA %s = %s, want %s", pool, pragma, got, w)
			}
		}
	}
	// The reader cannot write.
	if _, err := s.reader.ExecContext(t.Context(), `INSERT INTO users (id, name, created_at) VALUES ('x', 'x', 0)`); err == nil {
		t.Error("reader: INSERT succeeded, want a query-only connection")
	}
}

func TestOpenRejectsPath(t *testing.T) {
	for _, path := range []string{"", "a?b.db", "file:x.db", "x.db#frag"} {
		if s, err := Open(t.Context(), path, nil); err == nil {
			s.Close()
			t.Errorf("Open(%q): no error", path)
		}
	}
}

// inFileAndMemory runs f on a new database file and on an in-memory
// database, whose connections are not pooled alike.
func inFileAndMemory(t *testing.T, f func(t *testing.T, path string)) {
	for name, path := range map[string]string{"file": "", "memory": ":memory:"} {
		t.Run(name, func(t *testing.T) {
			if path == "" {
				path = filepath.Join(t.TempDir(), "talkide.db")
			}
			f(t, path)
		})
	}
}
