// Package pgtest gives each test a PostgreSQL schema of its own in the
// database that TALKIDE_TEST_DATABASE_URL names, for the store's tests and
// for any other package that tests against PostgreSQL.
//
// ./scripts/test.sh starts a throwaway server and sets the variable when it
// is unset (scripts/testdb.sh). Without it, URL fails the test with a message
// that says so; TALKIDE_TEST_DATABASE_URL=skip skips instead, for machines
// without PostgreSQL. See docs/storage.md.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvVar names the database the tests use: a postgres:// URL, or "skip".
const EnvVar = "TALKIDE_TEST_DATABASE_URL"

// Skip is the value of EnvVar that skips the PostgreSQL tests.
const Skip = "skip"

// explain makes BaseURL explain a missing EnvVar in full only once.
var explain sync.Once

// BaseURL returns the URL in EnvVar. It fails t when EnvVar is unset and
// skips t when it is Skip.
func BaseURL(t testing.TB) string {
	t.Helper()
	base := os.Getenv(EnvVar)
	switch base {
	case "":
		// The whole explanation once per test binary; every test fails.
		explained := true
		explain.Do(func() { explained = false })
		if explained {
			t.Fatalf("%s is not set (see the first failure)", EnvVar)
		}
		t.Fatalf("%s is not set. These tests need a PostgreSQL database: "+
			"run ./scripts/test.sh, which starts a throwaway one, "+
			"or eval \"$(./scripts/testdb.sh start)\" before go test (./scripts/testdb.sh stop afterwards), "+
			"or set %s=postgres://USER@HOST:PORT/DB to use your own (each test works in a new schema, dropped after it). "+
			"Without PostgreSQL, %s=%s skips them. See docs/storage.md.", EnvVar, EnvVar, EnvVar, Skip)
	case Skip:
		t.Skipf("%s=%s: skipping the PostgreSQL tests", EnvVar, Skip)
	}
	if !strings.HasPrefix(base, "postgres://") && !strings.HasPrefix(base, "postgresql://") {
		t.Fatalf("%s must be a postgres:// or postgresql:// URL, or %q", EnvVar, Skip)
	}
	return base
}

// URL creates a new, empty schema in the database of EnvVar and returns a
// URL whose search_path is that schema alone, so a store opened with it
// creates its tables there. The schema is dropped, with all it holds, when t
// and its subtests have finished. Like BaseURL, URL fails or skips t when
// EnvVar is unset or Skip.
func URL(t testing.TB) string {
	t.Helper()
	base := BaseURL(t)
	var b [8]byte
	rand.Read(b[:])
	schema := "talkide_test_" + hex.EncodeToString(b[:])

	exec(t, base, `CREATE SCHEMA `+schema)
	t.Cleanup(func() { exec(t, base, `DROP SCHEMA `+schema+` CASCADE`) })

	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s: %v", EnvVar, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// exec runs one statement on a connection of its own.
func exec(t testing.TB, dsn, sql string) {
	t.Helper()
	// Not t.Context(): the cleanup runs after it is cancelled.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to %s: %v", EnvVar, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, fmt.Errorf("on %s: %w", EnvVar, err))
	}
}
