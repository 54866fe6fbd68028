// Package sqlcore is the SQL of the control-plane store's CRUD tables, written
// once for both databases: Tables implements store.Store's methods on envs,
// identity tokens, users, conversations, usage records, reports and issues
// over a DB that store/sqlite and store/postgres each provide, with what
// really differs between the two in a Dialect.
//
// Each table's file holds its column list, its statements, the arguments
// they take from a store value and the scanner that makes one of a row.
// Every statement numbers its parameters $1, $2, …: PostgreSQL's own
// syntax, and SQLite reads $N as a named parameter, which modernc.org/sqlite
// binds to the N-th argument (a parameter named twice is one slot in both).
// Times are BIGINT unix milliseconds in both (Millis), so the dialects
// share that too.
package sqlcore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/talkide/platform/internal/store"
)

// Row is one row to scan: a *sql.Row or *sql.Rows, a pgx.Row or pgx.Rows.
type Row interface {
	Scan(dest ...any) error
}

// Rows is the result of Conn.Query: a pgx.Rows, or a *sql.Rows whose Close
// drops its error (Err has said what went wrong).
type Rows interface {
	Row
	Next() bool
	Err() error
	Close()
}

// Collect scans each of rows with scan. It does not close rows.
func Collect[T any](rows Rows, scan func(Row) (T, error)) ([]T, error) {
	var ts []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		ts = append(ts, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return ts, nil
}

// Conn runs statements: a store's connections outside a transaction, or one
// transaction. Tables passes only query texts that are constants or of a
// bounded few shapes, so that a store may prepare each text once and keep it
// (the SQLite store does).
type Conn interface {
	// Exec runs a statement and returns the number of rows it affected.
	Exec(ctx context.Context, query string, args ...any) (rows int64, err error)
	// QueryRow runs a query for one row. When there is none, Scan returns
	// the Dialect's NoRows.
	QueryRow(ctx context.Context, query string, args ...any) Row
	// Query runs a query; the caller closes its rows. Read and close them
	// before running another statement: on an in-memory SQLite database
	// they hold the only connection.
	Query(ctx context.Context, query string, args ...any) (Rows, error)
}

// Tx is a Conn in a transaction.
type Tx interface {
	Conn
	// ExecEach runs query once with each of args, in order, in as few round
	// trips as the database allows, and returns the rows each run
	// affected. On an error, rows holds those of the runs before the one
	// that failed (all of them when what failed came after the last run).
	ExecEach(ctx context.Context, query string, args [][]any) (rows []int64, err error)
}

// DB is a store's connections.
type DB interface {
	Conn
	// InTx runs f in a transaction and commits it when f returns nil, or
	// rolls it back and returns f's error. Tables relies on what both
	// stores' transactions give: each statement sees what committed before
	// it started, and an INSERT … ON CONFLICT DO NOTHING that meets a key a
	// concurrent transaction inserted waits for that one and then does
	// nothing (PostgreSQL at READ COMMITTED; SQLite runs one write
	// transaction at a time).
	InTx(ctx context.Context, f func(Tx) error) error
}

// Violation is the kind of constraint an error says a statement violated.
type Violation int

const (
	NoViolation Violation = iota // not a constraint violation
	ForeignKey                   // a foreign key names a row that does not exist: store.ErrNotFound
	Unique                       // a primary key or unique index is taken: store.ErrConflict
)

// ViolationOf returns a Dialect.Violation for a driver whose errors are of
// type E: the Violation that codes gives the code of err's E, if err has
// one.
func ViolationOf[E error, C comparable](code func(E) C, codes map[C]Violation) func(error) Violation {
	return func(err error) Violation {
		var e E
		if !errors.As(err, &e) {
			return NoViolation
		}
		return codes[code(e)]
	}
}

// Dialect is what differs between the databases in the CRUD tables' SQL and
// errors. The zero value of a string field is SQLite's.
type Dialect struct {
	// Name begins every error: "sqlite" or "postgres".
	Name string

	// NoRows is the error a Row's Scan returns when the query found no
	// row: sql.ErrNoRows or pgx.ErrNoRows.
	NoRows error

	// Violation says which constraint err violated, if any (see
	// ViolationOf).
	Violation func(err error) Violation

	// ByBytes follows a string column in ORDER BY to order it by its
	// bytes, as Go compares strings: ` COLLATE "C"` for PostgreSQL,
	// whatever the database's collation. Empty for SQLite, whose default
	// collation (BINARY) does already.
	ByBytes string

	// LockRow ends a SELECT of a row that the transaction goes on to
	// change on the strength of what it read, so that no other transaction
	// changes the row in between: " FOR UPDATE" for PostgreSQL. Empty for
	// SQLite, whose write transactions run one at a time.
	LockRow string

	// AnyOf returns the condition that column col holds one of vals (at
	// least one, at most 256), with its parameters numbered from $1, and
	// its arguments.
	// PostgreSQL binds vals as one array; SQLite, which has no arrays,
	// lists them.
	AnyOf func(col string, vals []string) (cond string, args []any)

	// Search is the conversation search's SQL (search.go); Hits and Match
	// must be set.
	Search Search
}

// Tables implements the store.Store methods of the CRUD tables on a DB.
// It is safe for concurrent use as far as its DB is.
type Tables struct {
	db   DB
	d    Dialect
	name string // d.Name, the first word of every error

	// The statements whose text depends on d, made once by New.
	listEnvs            string
	listConversations   string
	searchConversations string
	listUsage           string
	listReports         string
	listIssues          string
	lockIssue           string

	listMembershipsOfUser   string
	listMembershipsOfTenant string
	listMembershipsOfUserIn string
	listTenantConversations string
	listEnvConversations    string
	listAllAPITokens        string
	listUserAPITokens       string
}

// New returns the CRUD tables on db, written for d. Every field of d but
// the strings must be set.
func New(db DB, d Dialect) *Tables {
	if d.Name == "" || d.NoRows == nil || d.Violation == nil || d.AnyOf == nil || d.Search.Hits == "" || d.Search.Match == nil {
		panic("sqlcore: New: incomplete Dialect")
	}
	return &Tables{
		db:                  db,
		d:                   d,
		name:                d.Name,
		listEnvs:            listEnvs(d),
		listConversations:   listConversations(d),
		searchConversations: searchConversations(d),
		listUsage:           listUsage(d),
		listReports:         listReports(d),
		listIssues:          listIssues(d),
		lockIssue:           lockIssue(d),

		listMembershipsOfUser:   listMemberships(d, `user_id = $1`),
		listMembershipsOfTenant: listMemberships(d, `tenant = $1`),
		listMembershipsOfUserIn: listMemberships(d, `user_id = $1 AND tenant = $2`),
		listTenantConversations: listTenantConversations(d, `tenant = $1`),
		listEnvConversations:    listTenantConversations(d, `tenant = $1 AND env = $2`),
		listAllAPITokens:        listAPITokens(d, ``),
		listUserAPITokens:       listAPITokens(d, ` WHERE user_id = $1`),
	}
}

// notFound maps the dialect's no-rows error to store.ErrNotFound.
func (t *Tables) notFound(err error) error {
	if errors.Is(err, t.d.NoRows) {
		return store.ErrNotFound
	}
	return err
}

// constraint maps a violated constraint to the store's sentinel errors (see
// Violation), keeping err in the chain. Other errors are returned as they
// are.
func (t *Tables) constraint(err error) error {
	switch t.d.Violation(err) {
	case ForeignKey:
		return fmt.Errorf("%w: %w", store.ErrNotFound, err)
	case Unique:
		return fmt.Errorf("%w: %w", store.ErrConflict, err)
	}
	return err
}

// collect runs query on c and scans every row with scan.
func collect[T any](ctx context.Context, c Conn, scan func(Row) (T, error), query string, args ...any) ([]T, error) {
	rows, err := c.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return Collect(rows, scan)
}

// getByID scans the row that query, with id as its one argument, answers;
// what names the record in the error, which is store.ErrNotFound when there
// is no such row.
func getByID[T any](ctx context.Context, t *Tables, scan func(Row) (T, error), query, what, id string) (T, error) {
	v, err := scan(t.db.QueryRow(ctx, query, id))
	if err != nil {
		var zero T
		return zero, fmt.Errorf("%s: get %s %s: %w", t.name, what, id, t.notFound(err))
	}
	return v, nil
}

// Millis is how the schema keeps a time: BIGINT unix milliseconds. The
// zero time round-trips.
func Millis(t time.Time) int64 { return t.UnixMilli() }

// FromMillis is the inverse of Millis, in UTC.
func FromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// nullMillis keeps the zero time as NULL. Both drivers bind a nil *int64 as
// NULL and scan NULL into one.
func nullMillis(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	ms := Millis(t)
	return &ms
}

// fromNullMillis is the inverse of nullMillis.
func fromNullMillis(ms *int64) time.Time {
	if ms == nil {
		return time.Time{}
	}
	return FromMillis(*ms)
}

// ms is t as the store returns it: in UTC, to the millisecond.
func ms(t time.Time) time.Time { return FromMillis(Millis(t)) }
