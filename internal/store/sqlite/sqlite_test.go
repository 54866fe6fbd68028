package sqlite

import (
	"bytes"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/migrations"
	"github.com/talkide/platform/internal/store/storetest"
)

func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(t.Context(), path, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
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
	ms, err := migrations.Files()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "talkide.db")

	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	s, err := Open(t.Context(), path, &Options{Logger: logger})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if got := strings.Count(logs.String(), "applied migration"); got != len(ms) {
		t.Errorf("first Open logged %d applied migrations, want %d:\n%s", got, len(ms), logs.String())
	}
	first := schemaVersions(t, s)
	if len(first) != len(ms) {
		t.Errorf("after the first Open: %d migrations recorded, want %d", len(first), len(ms))
	}
	for _, m := range ms {
		if _, ok := first[m.Version]; !ok {
			t.Errorf("migration %s not recorded", m.Name)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Re-opening applies nothing: a second run of a CREATE TABLE would fail,
	// and the record is unchanged.
	logs.Reset()
	s, err = Open(t.Context(), path, &Options{Logger: logger})
	if err != nil {
		t.Fatalf("re-Open: %v", err)
	}
	defer s.Close()
	if logs.Len() != 0 {
		t.Errorf("re-Open logged:\n%s", logs.String())
	}
	if diff := cmp.Diff(first, schemaVersions(t, s)); diff != "" {
		t.Errorf("schema_migrations after re-open (-want +got):\n%s", diff)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "talkide.db")
	s, err := Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.writer.ExecContext(t.Context(), `INSERT INTO schema_migrations (version, applied_at) VALUES (9999, 0)`); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, err = Open(t.Context(), path, nil)
	if err == nil {
		s.Close()
		t.Fatal("Open of a database from a newer build: no error")
	}
	if !strings.Contains(err.Error(), "newer") {
		t.Errorf("Open: %v, want it to say the schema is newer", err)
	}
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
