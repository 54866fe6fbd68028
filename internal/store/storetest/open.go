package storetest

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/store/migrations"
)

// Open opens a backend's store on the database at where, with its default
// options, and closes it when the test ends; an error either way fails the
// test.
func Open[S io.Closer, O any](t testing.TB, open func(context.Context, string, *O) (S, error), where string) S {
	t.Helper()
	s, err := open(t.Context(), where, nil)
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

// Schema is how the migration tests reach one database of a backend.
type Schema[S io.Closer] struct {
	// Open opens the database, logging to logger, as a process of this
	// build does when it starts: the migrations it lacks are applied.
	Open func(logger *slog.Logger) (S, error)
	// Versions reads schema_migrations as version → applied_at.
	Versions func(t *testing.T, s S) map[int]int64
	// Exec runs a statement on the database outside the store's methods.
	Exec func(t *testing.T, s S, query string)
}

// MigrationsAppliedOnce checks that a first Open of a fresh database
// applies and records every migration once, logging each, and that a
// second applies nothing: a second run of a CREATE TABLE would fail, and
// the record is unchanged.
func MigrationsAppliedOnce[S io.Closer](t *testing.T, db Schema[S]) {
	// Both dialects have the same versions (Files holds them to it).
	ms, err := migrations.Files(migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	s, err := db.Open(logger)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if got := strings.Count(logs.String(), "applied migration"); got != len(ms) {
		t.Errorf("first Open logged %d applied migrations, want %d:\n%s", got, len(ms), logs.String())
	}
	first := db.Versions(t, s)
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

	logs.Reset()
	s, err = db.Open(logger)
	if err != nil {
		t.Fatalf("re-Open: %v", err)
	}
	defer s.Close()
	if logs.Len() != 0 {
		t.Errorf("re-Open logged:\n%s", logs.String())
	}
	if diff := cmp.Diff(first, db.Versions(t, s)); diff != "" {
		t.Errorf("schema_migrations after re-open (-want +got):\n%s", diff)
	}
}

// NewerSchemaRefused checks that a database a newer build migrated, one
// with a migration this build does not know, is refused rather than used.
func NewerSchemaRefused[S io.Closer](t *testing.T, db Schema[S]) {
	s, err := db.Open(nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Exec(t, s, `INSERT INTO schema_migrations (version, applied_at) VALUES (9999, 0)`)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = db.Open(nil)
	if err == nil {
		s.Close()
		t.Fatal("Open of a database from a newer build: no error")
	}
	if !strings.Contains(err.Error(), "newer") {
		t.Errorf("Open: %v, want it to say the schema is newer", err)
	}
}
