package sqlcore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/store"
)

// values is a row of a hand-written fake: Scan assigns each value to its
// destination, which must be a pointer to the value's type.
type values []any

func (v values) Scan(dest ...any) error {
	if len(dest) != len(v) {
		return fmt.Errorf("%d columns scanned into %d destinations", len(v), len(dest))
	}
	for i, d := range dest {
		dv := reflect.ValueOf(d).Elem()
		vv := reflect.ValueOf(v[i])
		if vv.Type() != dv.Type() {
			return fmt.Errorf("column %d: a %v scanned into a %v", i, vv.Type(), dv.Type())
		}
		dv.Set(vv)
	}
	return nil
}

// rows is a result of values.
type rows struct {
	rs  []values
	at  int
	err error // Err's, after the last row
}

func (r *rows) Next() bool             { r.at++; return r.at <= len(r.rs) }
func (r *rows) Scan(dest ...any) error { return r.rs[r.at-1].Scan(dest...) }
func (r *rows) Err() error             { return r.err }
func (r *rows) Close()                 {}

// t0 is not in UTC and has nanoseconds: the store keeps milliseconds in UTC.
var t0 = time.Date(2025, 3, 1, 14, 30, 0, 123_456_789, time.FixedZone("CET", 3600))

var hash = [32]byte{1, 2, 3, 0xfe, 0xff}

// TestArgsScanRoundTrip checks each table's argument builder against its
// scanner: what the one writes in the columns' order, the other reads back
// (the reports' SELECT reads a part of the columns).
func TestArgsScanRoundTrip(t *testing.T) {
	conv := store.Conversation{ID: "c1", Tenant: "acme", Env: "prod", UserID: "ada", Title: "T", CreatedAt: t0, LastActivityAt: t0.Add(time.Minute)}
	issue := store.Issue{ID: "i1", Tenant: "acme", Env: "prod", ConversationID: "c1", UserID: "ada", TurnID: "t1",
		IdempotencyKey: "k", Title: "T", Body: "B", Severity: "minor", Labels: []string{"a", "b"}, Status: "open",
		CreatedAt: t0, UpdatedAt: t0.Add(time.Hour)}
	report := contract.Report{IdempotencyKey: "k", Kind: "turn.finished", ConversationID: "c1", TurnID: "t1", Time: t0}
	reportRow, err := reportArgs("acme", "prod", report, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	issueRow, err := issueArgs(issue)
	if err != nil {
		t.Fatal(err)
	}
	noLabels := issue
	noLabels.Labels = nil
	noLabelsRow, err := issueArgs(noLabels)
	if err != nil {
		t.Fatal(err)
	}
	report.Time = ms(t0)

	tests := map[string]struct {
		row  values
		scan func(Row) (any, error)
		want any
	}{
		"env": {
			// the insert's columns, a NULL retired_at and the default scale
			row:  append(envArgs(store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://w", CreatedAt: t0}), nullMillis(time.Time{}), int64(0), int64(0), int64(0)),
			scan: scanAs(scanEnv),
			want: store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://w", CreatedAt: ms(t0)},
		},
		"retired env": {
			row:  append(envArgs(store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://w", CreatedAt: t0}), nullMillis(t0), int64(0), int64(0), int64(0)),
			scan: scanAs(scanEnv),
			want: store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://w", CreatedAt: ms(t0), RetiredAt: ms(t0)},
		},
		"scaled env": {
			// min_replicas, max_replicas, turns_per_replica
			row:  append(envArgs(store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://w", CreatedAt: t0}), nullMillis(time.Time{}), int64(2), int64(5), int64(4)),
			scan: scanAs(scanEnv),
			want: store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://w", CreatedAt: ms(t0), Scale: store.EnvScale{MinReplicas: 2, MaxReplicas: 5, TurnsPerReplica: 4}},
		},
		"user": {
			row:  userArgs(store.User{ID: "ada", Name: "Ada", CreatedAt: t0}),
			scan: scanAs(scanUser),
			want: store.User{ID: "ada", Name: "Ada", CreatedAt: ms(t0)},
		},
		"token": {
			row:  tokenArgs(store.IdentityToken{ID: "tok", Tenant: "acme", Env: "prod", Hash: hash, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}),
			scan: scanAs(scanToken),
			want: store.IdentityToken{ID: "tok", Tenant: "acme", Env: "prod", Hash: hash, CreatedAt: ms(t0), ExpiresAt: ms(t0.Add(time.Hour))},
		},
		"revoked token": {
			row:  tokenArgs(store.IdentityToken{ID: "tok", Hash: hash, RevokedAt: t0}),
			scan: scanAs(scanToken),
			want: store.IdentityToken{ID: "tok", Hash: hash, CreatedAt: ms(time.Time{}), ExpiresAt: ms(time.Time{}), RevokedAt: ms(t0)},
		},
		"conversation": {
			// the insert's columns and a NULL archived_at
			row:  append(conversationArgs(conv), nullMillis(time.Time{})),
			scan: scanAs(scanConversation),
			want: store.Conversation{ID: "c1", Tenant: "acme", Env: "prod", UserID: "ada", Title: "T", CreatedAt: ms(t0), LastActivityAt: ms(t0.Add(time.Minute))},
		},
		"archived conversation": {
			row:  append(conversationArgs(conv), nullMillis(t0.Add(time.Hour))),
			scan: scanAs(scanConversation),
			want: store.Conversation{ID: "c1", Tenant: "acme", Env: "prod", UserID: "ada", Title: "T", CreatedAt: ms(t0), LastActivityAt: ms(t0.Add(time.Minute)), ArchivedAt: ms(t0.Add(time.Hour))},
		},
		"usage": {
			row: usageArgs(store.UsageRecord{ID: "u1", Tenant: "acme", Env: "prod", ConversationID: "c1", UserID: "ada",
				Model: "m", Status: 529, Streamed: true, InputTokens: 1, OutputTokens: 2, CacheCreationInputTokens: 3,
				CacheReadInputTokens: 4, StartedAt: t0, Duration: 1500 * time.Microsecond}),
			scan: scanAs(scanUsage),
			want: store.UsageRecord{ID: "u1", Tenant: "acme", Env: "prod", ConversationID: "c1", UserID: "ada",
				Model: "m", Status: 529, Streamed: true, InputTokens: 1, OutputTokens: 2, CacheCreationInputTokens: 3,
				CacheReadInputTokens: 4, StartedAt: ms(t0), Duration: 1500 * time.Microsecond},
		},
		"report": {
			// tenant, env, time, body, received_at of the insert's columns
			row:  values{reportRow[0], reportRow[1], reportRow[6], reportRow[7], reportRow[8]},
			scan: scanAs(scanReport),
			want: store.StoredReport{Tenant: "acme", Env: "prod", Report: report, ReceivedAt: ms(t0.Add(time.Second))},
		},
		"issue": {
			row:  issueRow,
			scan: scanAs(scanIssue),
			want: store.Issue{ID: "i1", Tenant: "acme", Env: "prod", ConversationID: "c1", UserID: "ada", TurnID: "t1",
				IdempotencyKey: "k", Title: "T", Body: "B", Severity: "minor", Labels: []string{"a", "b"}, Status: "open",
				CreatedAt: ms(t0), UpdatedAt: ms(t0.Add(time.Hour))},
		},
		"issue without labels": {
			row:  noLabelsRow,
			scan: scanAs(scanIssue),
			want: store.Issue{ID: "i1", Tenant: "acme", Env: "prod", ConversationID: "c1", UserID: "ada", TurnID: "t1",
				IdempotencyKey: "k", Title: "T", Body: "B", Severity: "minor", Labels: []string{}, Status: "open",
				CreatedAt: ms(t0), UpdatedAt: ms(t0.Add(time.Hour))},
		},
		"comment": {
			row:  commentArgs(store.IssueComment{ID: "m1", IssueID: "i1", TurnID: "t1", IdempotencyKey: "k", Body: "B", Status: "closed", CreatedAt: t0}),
			scan: scanAs(scanComment),
			want: store.IssueComment{ID: "m1", IssueID: "i1", TurnID: "t1", IdempotencyKey: "k", Body: "B", Status: "closed", CreatedAt: ms(t0)},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := tt.scan(tt.row)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("scanned (-want +got):\n%s", diff)
			}
		})
	}
}

// scanAs makes a scanner's result an any, for a table of scanners.
func scanAs[T any](scan func(Row) (T, error)) func(Row) (any, error) {
	return func(r Row) (any, error) { return scan(r) }
}

// TestScanBadRows: a stored value that cannot be what the store returns is
// an error, not a panic or a wrong value.
func TestScanBadRows(t *testing.T) {
	token := func(hash string) values {
		return values{"tok", "acme", "prod", hash, int64(0), int64(0), (*int64)(nil)}
	}
	issue := func(labels string) values {
		return values{"i1", "acme", "prod", "k", "c1", "ada", "t1", "T", "B", "minor", labels, "open", int64(0), int64(0)}
	}
	report := func(body string) values { return values{"acme", "prod", int64(0), body, int64(0)} }
	tests := map[string]struct {
		row  values
		scan func(Row) (any, error)
		want string // in the error
	}{
		"short hash":         {token("abcd"), scanAs(scanToken), "stored hash has 4 hex digits"},
		"long hash":          {token(strings.Repeat("a", 66)), scanAs(scanToken), "stored hash has 66 hex digits"},
		"hash not hex":       {token(strings.Repeat("zz", 32)), scanAs(scanToken), "stored hash: encoding/hex"},
		"labels not JSON":    {issue("a,b"), scanAs(scanIssue), "issue i1: labels"},
		"labels not strings": {issue("[1, 2]"), scanAs(scanIssue), "issue i1: labels"},
		"report body":        {report("{"), scanAs(scanReport), "report body"},
		"report body array":  {report("[]"), scanAs(scanReport), "report body"},
		"missing column":     {values{"ada", "Ada"}, scanAs(scanUser), "2 columns scanned into 3"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := tt.scan(tt.row)
			if err == nil {
				t.Fatalf("no error; scanned %+v", got)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

// codeError is a driver's error of a fake database.
type codeError struct{ code string }

func (e *codeError) Error() string { return "code " + e.code }

var fakeViolation = ViolationOf(func(e *codeError) string { return e.code }, map[string]Violation{
	"fk": ForeignKey, "uq": Unique,
})

func TestViolationOf(t *testing.T) {
	tests := map[string]struct {
		err  error
		want Violation
	}{
		"foreign key":   {&codeError{"fk"}, ForeignKey},
		"unique":        {&codeError{"uq"}, Unique},
		"wrapped":       {fmt.Errorf("insert: %w", &codeError{"uq"}), Unique},
		"another code":  {&codeError{"check"}, NoViolation},
		"another error": {errors.New("uq"), NoViolation},
		"no error":      {nil, NoViolation},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := fakeViolation(tt.err); got != tt.want {
				t.Errorf("Violation(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestConstraintAndNotFound(t *testing.T) {
	tb := New(&fakeDB{}, fakeDialect)
	fk, uq, other := &codeError{"fk"}, &codeError{"uq"}, errors.New("disk full")
	tests := map[string]struct {
		got      error
		sentinel error // nil: none
		cause    error
	}{
		"foreign key": {tb.constraint(fk), store.ErrNotFound, fk},
		"unique":      {tb.constraint(uq), store.ErrConflict, uq},
		"other":       {tb.constraint(other), nil, other},
		"no rows":     {tb.notFound(fmt.Errorf("scan: %w", errNoRows)), store.ErrNotFound, store.ErrNotFound},
		"not no rows": {tb.notFound(other), nil, other},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			for _, s := range []error{store.ErrNotFound, store.ErrConflict} {
				if want := s == tt.sentinel; errors.Is(tt.got, s) != want {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", tt.got, s, !want, want)
				}
			}
			if !errors.Is(tt.got, tt.cause) {
				t.Errorf("%v does not keep %v", tt.got, tt.cause)
			}
		})
	}
}

func TestNewRefusesIncompleteDialect(t *testing.T) {
	for name, d := range map[string]Dialect{
		"no name":      {NoRows: errNoRows, Violation: fakeViolation, AnyOf: fakeAnyOf},
		"no NoRows":    {Name: "fake", Violation: fakeViolation, AnyOf: fakeAnyOf},
		"no Violation": {Name: "fake", NoRows: errNoRows, AnyOf: fakeAnyOf},
		"no AnyOf":     {Name: "fake", NoRows: errNoRows, Violation: fakeViolation},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("New: no panic")
				}
			}()
			New(&fakeDB{}, d)
		})
	}
}

var errNoRows = errors.New("fake: no rows")

func fakeAnyOf(col string, vals []string) (string, []any) {
	return col + " IN " + fmt.Sprint(len(vals)), []any{vals}
}

var fakeDialect = Dialect{Name: "fake", NoRows: errNoRows, Violation: fakeViolation, AnyOf: fakeAnyOf,
	Search: Search{Hits: "hits", Match: func(terms []string) string { return strings.Join(terms, " ") }}}

// fakeDB is a DB and its Tx. It answers Query with query's rows, and
// ExecEach by failing at the run failAt (none when negative).
type fakeDB struct {
	rows    func(query string, args []any) []values
	failAt  int
	queries []string // what Query ran
	args    [][]any  // with these arguments
}

func (f *fakeDB) Exec(context.Context, string, ...any) (int64, error) { return 1, nil }

func (f *fakeDB) QueryRow(context.Context, string, ...any) Row { return values{} }

func (f *fakeDB) Query(_ context.Context, query string, args ...any) (Rows, error) {
	f.queries, f.args = append(f.queries, query), append(f.args, args)
	return &rows{rs: f.rows(query, args)}, nil
}

func (f *fakeDB) InTx(_ context.Context, fn func(Tx) error) error { return fn(f) }

var errBatch = errors.New("fake: batch failed")

func (f *fakeDB) ExecEach(_ context.Context, _ string, args [][]any) ([]int64, error) {
	n := make([]int64, 0, len(args))
	for i := range args {
		if i == f.failAt {
			return n, errBatch
		}
		n = append(n, int64(i%2))
	}
	if f.failAt == len(args) { // after the last run: the commit, say
		return n, errBatch
	}
	return n, nil
}

// TestBatchErrorsName: an error of one run of a batch names the record it
// ran for, in the order the batch ran them (sorted by key); an error after
// the last run names none.
func TestBatchErrorsName(t *testing.T) {
	us := []store.UsageRecord{{ID: "c"}, {ID: "a"}, {ID: "b"}}
	rs := []contract.Report{{IdempotencyKey: "c"}, {IdempotencyKey: "a"}, {IdempotencyKey: "c"}, {IdempotencyKey: "b"}}
	const (
		usages  = "fake: record 3 usage records: "
		reports = "fake: add reports of acme/prod: "
	)
	tests := map[string]struct {
		failAt       int
		usage, batch string // the errors; "" for none
	}{
		"first":      {0, usages + "usage a: fake: batch failed", reports + "report a: fake: batch failed"},
		"middle":     {1, usages + "usage b: fake: batch failed", reports + "report b: fake: batch failed"},
		"last":       {2, usages + "usage c: fake: batch failed", reports + "report c: fake: batch failed"},
		"after last": {3, usages + "fake: batch failed", reports + "fake: batch failed"},
		"none":       {-1, "", ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			tb := New(&fakeDB{failAt: tt.failAt}, fakeDialect)
			_, _, reportsErr := tb.AddReports(t.Context(), "acme", "prod", rs, t0)
			for _, c := range []struct {
				method string
				err    error
				want   string
			}{
				{"RecordUsages", tb.RecordUsages(t.Context(), us), tt.usage},
				{"AddReports", reportsErr, tt.batch},
			} {
				switch {
				case c.want == "" && c.err != nil:
					t.Errorf("%s: %v", c.method, c.err)
				case c.want != "" && (c.err == nil || c.err.Error() != c.want):
					t.Errorf("%s: %v, want %s", c.method, c.err, c.want)
				case c.want != "" && !errors.Is(c.err, errBatch):
					t.Errorf("%s: %v does not keep the batch's error", c.method, c.err)
				}
			}
		})
	}
}

// TestAddReportsCounts: the first report of each key goes to the database,
// once; what it does not insert and every later report of a key are
// duplicates.
func TestAddReportsCounts(t *testing.T) {
	tb := New(&fakeDB{failAt: -1}, fakeDialect) // inserts every other run: 0, 1, 0
	rs := []contract.Report{{IdempotencyKey: "c"}, {IdempotencyKey: "a"}, {IdempotencyKey: "c"}, {IdempotencyKey: "b"}}
	added, duplicates, err := tb.AddReports(t.Context(), "acme", "prod", rs, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(added, []int{3}) || duplicates != 3 {
		t.Errorf("AddReports = added %v, %d duplicates; want [3] (b), 3", added, duplicates)
	}
	for _, rs := range [][]contract.Report{nil, {{IdempotencyKey: "a"}, {}}} {
		added, duplicates, err := tb.AddReports(t.Context(), "acme", "prod", rs, t0)
		if len(rs) == 0 && (err != nil || added != nil || duplicates != 0) {
			t.Errorf("AddReports of none = %v, %d, %v; want none, 0, nil", added, duplicates, err)
		}
		if len(rs) > 0 && (err == nil || !strings.Contains(err.Error(), "report 1 has no idempotency key")) {
			t.Errorf("AddReports of a report without a key: %v", err)
		}
	}
}

// TestCommentsInChunks: ListIssues asks for the comments of at most
// maxAnyOf issues at a time, and gives each issue its own.
func TestCommentsInChunks(t *testing.T) {
	const n = 2*maxAnyOf + 10
	issue := func(id string) values {
		return values{id, "acme", "prod", "k" + id, "c1", "ada", "t1", "T", "B", "minor", "[]", "open", int64(0), int64(0)}
	}
	db := &fakeDB{rows: func(query string, args []any) []values {
		var rs []values
		if strings.Contains(query, "FROM issues") {
			for i := range n {
				rs = append(rs, issue(fmt.Sprint("i", i)))
			}
			return rs
		}
		for _, id := range args[0].([]string) { // fakeAnyOf's
			rs = append(rs, values{"m" + id, id, "k", "t1", "on " + id, "", int64(0)})
		}
		return rs
	}}
	is, err := New(db, fakeDialect).ListIssues(t.Context(), "c1", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var sizes []string
	for _, q := range db.queries[1:] {
		sizes = append(sizes, q[strings.Index(q, "issue_id IN ")+len("issue_id IN "):strings.Index(q, " ORDER BY")])
	}
	if diff := cmp.Diff([]string{fmt.Sprint(maxAnyOf), fmt.Sprint(maxAnyOf), "10"}, sizes); diff != "" {
		t.Errorf("comment queries of ids (-want +got):\n%s", diff)
	}
	if len(is) != n {
		t.Fatalf("%d issues, want %d", len(is), n)
	}
	for _, i := range is {
		want := []store.IssueComment{{ID: "m" + i.ID, IssueID: i.ID, IdempotencyKey: "k", TurnID: "t1", Body: "on " + i.ID, CreatedAt: FromMillis(0)}}
		if diff := cmp.Diff(want, i.Comments, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("issue %s: comments (-want +got):\n%s", i.ID, diff)
			break
		}
	}
	// No limit is the largest LIMIT, a limit itself.
	if diff := cmp.Diff([]any{"c1", "", int64(1<<63 - 1)}, db.args[0]); diff != "" {
		t.Errorf("ListIssues without a limit: arguments (-want +got):\n%s", diff)
	}
	db.args = nil
	if _, err := New(db, fakeDialect).ListIssues(t.Context(), "c1", "open", 3); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]any{"c1", "open", int64(3)}, db.args[0]); diff != "" {
		t.Errorf("ListIssues(open, 3): arguments (-want +got):\n%s", diff)
	}
}

func TestMillis(t *testing.T) {
	for _, tt := range []time.Time{{}, t0, time.UnixMilli(-1), time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC)} {
		got := FromMillis(Millis(tt))
		if want := tt.Truncate(time.Millisecond).UTC(); !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("FromMillis(Millis(%v)) = %v, want %v", tt, got, want)
		}
		n := nullMillis(tt)
		if (n == nil) != tt.IsZero() {
			t.Errorf("nullMillis(%v) = %v, want nil just for the zero time", tt, n)
		}
		want := time.Time{}
		if !tt.IsZero() {
			want = got
		}
		if got := fromNullMillis(n); got != want {
			t.Errorf("fromNullMillis(nullMillis(%v)) = %v, want %v", tt, got, want)
		}
	}
}
