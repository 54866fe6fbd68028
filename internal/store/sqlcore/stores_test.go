package sqlcore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/talkide/platform/internal/store"
)

// TestManyIssues lists more issues than sqlcore asks the comments of at
// once, on every store, so that the comments come in several queries (and
// on SQLite in IN lists of every size it rounds to): each issue still gets
// its own, in order.
func TestManyIssues(t *testing.T) {
	const n = 300
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			s := open(t)
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(s.PutEnv(ctx, store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://w", CreatedAt: t0}))
			must(s.PutUser(ctx, store.User{ID: "ada", Name: "Ada", CreatedAt: t0}))
			_, _, err := s.CreateConversation(ctx, store.Conversation{ID: "c0", Tenant: "acme", Env: "prod", UserID: "ada", CreatedAt: t0})
			must(err)

			want := make([]store.Issue, n) // newest first
			for i := range n {
				at := t0.Add(time.Duration(i) * time.Second)
				is, _, err := s.CreateIssue(ctx, issue(fmt.Sprintf("i%03d", i), at))
				must(err)
				for k := range i % 3 { // 0, 1 or 2 comments
					c, _, err := s.AddIssueComment(ctx, comment(fmt.Sprint(is.ID, "-", k), is.ID, at))
					must(err)
					is.Comments = append(is.Comments, c)
				}
				want[n-1-i] = is
			}

			got, err := s.ListIssues(ctx, "c0", "", 0)
			must(err)
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ListIssues (-want +got):\n%s", diff)
			}
			got, err = s.ListIssues(ctx, "c0", "open", 5)
			must(err)
			if diff := cmp.Diff(want[:5], got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ListIssues(open, 5) (-want +got):\n%s", diff)
			}
			got, err = s.ListIssues(ctx, "c0", "closed", 0)
			must(err)
			if len(got) != 0 {
				t.Errorf("ListIssues(closed): %d issues, want none", len(got))
			}
		})
	}
}
