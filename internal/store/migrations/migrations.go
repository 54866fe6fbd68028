// Package migrations holds the control-plane's schema as numbered SQL files,
// written once in SQL portable to SQLite and PostgreSQL and applied in order
// by every store implementation.
//
// # Files
//
// A migration is a file NNNN_name.sql: a version number (from 1, without
// gaps) and a short name. It is never edited once released; a change to the
// schema is a new file.
//
// # Portable SQL
//
// Ids and strings are TEXT, integers BIGINT, times BIGINT unix milliseconds
// UTC, hashes lowercase hex TEXT; no BLOB, no AUTOINCREMENT, nothing only one
// of the databases understands.
//
// # Dialect files
//
// What has no portable form (full-text search: SQLite's FTS5, PostgreSQL's
// tsvector and GIN) is a version written twice, NNNN_name.sqlite.sql and
// NNNN_name.postgres.sql, and no NNNN_name.sql: each store applies its own
// under the one version number, so the numbering stays one sequence.
//
// # Statements
//
// A statement ends with a semicolon that is the last character of its line
// (trailing blanks aside). No semicolon may appear anywhere else, not even in
// a string literal or a comment, because files are split on that rule rather
// than parsed. Lines that hold only a -- comment are dropped.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
)

//go:embed *.sql
var files embed.FS

// VersionTable creates the table in which a store records the migrations it
// has applied. A store runs it before it reads the table, so it is not part of
// any migration.
const VersionTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    BIGINT NOT NULL PRIMARY KEY,
    applied_at BIGINT NOT NULL
)`

// The dialects of a store, as dialect files name them.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
)

// dialects are every dialect a version written per dialect must have.
var dialects = []string{SQLite, Postgres}

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string // the file name, e.g. "0001_init.sql"
	SQL     string // the file's text
	// Dialect is the dialect of a dialect file; "" for a portable one.
	Dialect string
}

// Statements splits m.SQL into statements, each without its semicolon, by the
// rule in the package documentation. Files has already checked that it
// succeeds.
func (m Migration) Statements() []string {
	stmts, _ := split(m.SQL)
	return stmts
}

// Files returns the embedded migrations of dialect (SQLite or Postgres)
// sorted by version: the portable files and that dialect's files. It fails
// when a file is misnamed, versions repeat or leave a gap, a version
// written per dialect lacks one of them, or a file does not split into
// statements.
func Files(dialect string) ([]Migration, error) {
	if !slices.Contains(dialects, dialect) {
		return nil, fmt.Errorf("migrations: unknown dialect %q", dialect)
	}
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, err
	}
	ms := make([]Migration, 0, len(names))
	perDialect := map[int][]string{} // version → its dialect files' dialects
	for _, name := range names {
		v, err := version(name)
		if err != nil {
			return nil, err
		}
		d := dialectOf(name)
		if d != "" {
			perDialect[v] = append(perDialect[v], d)
			if d != dialect {
				continue
			}
		}
		b, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		m := Migration{Version: v, Name: name, SQL: string(b), Dialect: d}
		if _, err := split(m.SQL); err != nil {
			return nil, fmt.Errorf("migration %s: %w", name, err)
		}
		ms = append(ms, m)
	}
	for v, ds := range perDialect {
		slices.Sort(ds)
		if want := slices.Sorted(slices.Values(dialects)); !slices.Equal(ds, want) {
			return nil, fmt.Errorf("migration %04d: dialect files for %v, want exactly one for each of %v", v, ds, want)
		}
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %s: version %d, want %d: versions start at 1 without gaps or repeats", m.Name, m.Version, i+1)
		}
	}
	return ms, nil
}

// dialectOf returns the dialect of a dialect file's name
// (NNNN_name.DIALECT.sql), "" for a portable one.
func dialectOf(name string) string {
	for _, d := range dialects {
		if strings.HasSuffix(name, "."+d+".sql") {
			return d
		}
	}
	return ""
}

// version parses the NNNN of NNNN_name.sql.
func version(name string) (int, error) {
	num, rest, ok := strings.Cut(name, "_")
	if !ok || rest == ".sql" {
		return 0, fmt.Errorf("migration %s: name is not NNNN_name.sql", name)
	}
	v, err := strconv.Atoi(num)
	if err != nil || v < 1 {
		return 0, fmt.Errorf("migration %s: name is not NNNN_name.sql", name)
	}
	return v, nil
}

// split implements the statement rule of the package documentation.
func split(sql string) ([]string, error) {
	var (
		stmts []string
		cur   []string
	)
	for i, line := range strings.Split(sql, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		line = strings.TrimRight(line, " \t\r")
		body, end := strings.CutSuffix(line, ";")
		if strings.Contains(body, ";") {
			return nil, fmt.Errorf("line %d: semicolon inside a statement", i+1)
		}
		cur = append(cur, body)
		if end {
			stmt := strings.TrimSpace(strings.Join(cur, "\n"))
			if stmt == "" {
				return nil, fmt.Errorf("line %d: empty statement", i+1)
			}
			stmts = append(stmts, stmt)
			cur = nil
		}
	}
	if len(cur) > 0 {
		return nil, fmt.Errorf("statement without a final semicolon")
	}
	if len(stmts) == 0 {
		return nil, fmt.Errorf("no statements")
	}
	return stmts, nil
}

// CheckVersion refuses a database whose schema version, latest, is past the
// last of ms: a newer build has migrated it further than this one knows.
func CheckVersion(latest int64, ms []Migration) error {
	if known := int64(len(ms)); latest > known {
		return fmt.Errorf("database schema version %d is newer than this build's %d", latest, known)
	}
	return nil
}

// ApplyAll applies ms in order with apply, which reports whether it
// applied one or found it recorded already, and logs each it applied.
func ApplyAll(ms []Migration, log *slog.Logger, apply func(Migration) (applied bool, err error)) error {
	for _, m := range ms {
		applied, err := apply(m)
		if err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
		if applied {
			log.Info("applied migration", "version", m.Version, "name", m.Name)
		}
	}
	return nil
}
