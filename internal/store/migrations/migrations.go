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

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string // the file name, e.g. "0001_init.sql"
	SQL     string // the file's text
}

// Statements splits m.SQL into statements, each without its semicolon, by the
// rule in the package documentation. Files has already checked that it
// succeeds.
func (m Migration) Statements() []string {
	stmts, _ := split(m.SQL)
	return stmts
}

// Files returns the embedded migrations sorted by version. It fails when a
// file is misnamed, versions repeat or leave a gap, or a file does not split
// into statements.
func Files() ([]Migration, error) {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, err
	}
	ms := make([]Migration, 0, len(names))
	for _, name := range names {
		v, err := version(name)
		if err != nil {
			return nil, err
		}
		b, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		m := Migration{Version: v, Name: name, SQL: string(b)}
		if _, err := split(m.SQL); err != nil {
			return nil, fmt.Errorf("migration %s: %w", name, err)
		}
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %s: version %d, want %d: versions start at 1 without gaps or repeats", m.Name, m.Version, i+1)
		}
	}
	return ms, nil
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
