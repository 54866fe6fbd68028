package sqlite

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/store"
)

// TestDollarParameters holds the driver to what sqlcore's statements rely
// on: $N is the N-th argument, however often and in whatever order the
// statement names it.
func TestDollarParameters(t *testing.T) {
	inFileAndMemory(t, func(t *testing.T, path string) {
		s := open(t, path)
		var a, b, c, d string
		err := newPools(s).QueryRow(t.Context(), `SELECT $2, $1, $2, $3 || $1`, "one", "two", "three").Scan(&a, &b, &c, &d)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"two", "one", "two", "threeone"}, []string{a, b, c, d}); diff != "" {
			t.Errorf("SELECT $2, $1, $2, $3 || $1 (-want +got):\n%s", diff)
		}
	})
}

func TestAnyOf(t *testing.T) {
	tests := map[string]struct {
		vals     []string
		cond     string
		wantArgs []any
	}{
		"one":   {[]string{"a"}, "c IN ($1)", []any{"a"}},
		"two":   {[]string{"a", "b"}, "c IN ($1, $2)", []any{"a", "b"}},
		"three": {[]string{"a", "b", "c"}, "c IN ($1, $2, $3, $4)", []any{"a", "b", "c", "c"}},
		"five":  {[]string{"a", "b", "c", "d", "e"}, "c IN ($1, $2, $3, $4, $5, $6, $7, $8)", []any{"a", "b", "c", "d", "e", "e", "e", "e"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			cond, args := anyOf("c", tt.vals)
			if cond != tt.cond {
				t.Errorf("condition %q, want %q", cond, tt.cond)
			}
			if diff := cmp.Diff(tt.wantArgs, args); diff != "" {
				t.Errorf("arguments (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCommentQueriesBounded: listing issues of every number from 1 to 40
// prepares the comments' query in a few texts, not one a number, since
// every text stays prepared until Close.
func TestCommentQueriesBounded(t *testing.T) {
	ctx := t.Context()
	s := benchStore(t, 1)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const n = 40
	for i := range n {
		_, _, err := s.CreateIssue(ctx, store.Issue{ID: fmt.Sprint("i", i), Tenant: "acme", Env: "prod", ConversationID: "c0",
			UserID: "ada", IdempotencyKey: fmt.Sprint("k", i), Status: "open"})
		must(err)
	}
	for limit := 1; limit <= n; limit++ {
		is, err := s.ListIssues(ctx, "c0", "", limit)
		must(err)
		if len(is) != limit {
			t.Fatalf("ListIssues(limit %d): %d issues", limit, len(is))
		}
	}
	texts := 0
	s.readStmts.stmts.Range(func(q, _ any) bool {
		if strings.Contains(q.(string), "FROM issue_comments") {
			texts++
		}
		return true
	})
	if texts != 7 { // 1, 2, 4, … 64 issues
		t.Errorf("%d texts of the comments' query prepared, want 7", texts)
	}
}

func TestPositional(t *testing.T) {
	tests := map[string]string{
		`SELECT 1`:                      `SELECT 1`,
		`SELECT a FROM t WHERE id = $1`: `SELECT a FROM t WHERE id = ?`,
		`INSERT INTO t VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`: `INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		`UPDATE t SET a = $1 WHERE b = $2`:                                    `UPDATE t SET a = ? WHERE b = ?`,
		// Named twice, out of order, not from 1, or a $ that is no
		// parameter: left to the driver's binding by name.
		`SELECT $1 WHERE $2 = '' OR s = $2`: `SELECT $1 WHERE $2 = '' OR s = $2`,
		`SELECT $2, $1`:                     `SELECT $2, $1`,
		`SELECT $2`:                         `SELECT $2`,
		`SELECT $1, $3`:                     `SELECT $1, $3`,
		`SELECT $1, $`:                      `SELECT $1, $`,
		`SELECT $a`:                         `SELECT $a`,
		`SELECT ?`:                          `SELECT ?`,
	}
	for in, want := range tests {
		if got := positional(in); got != want {
			t.Errorf("positional(%q) = %q, want %q", in, got, want)
		}
	}
}
