package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/store"
)

// issueTests are the issue cases of Run.
var issueTests = map[string]func(*testing.T, store.Store){
	"Issues":                  testIssues,
	"IssueComments":           testIssueComments,
	"IssueList":               testIssueList,
	"IssuesConcurrent":        testIssuesConcurrent,
	"IssueCommentsConcurrent": testIssueCommentsConcurrent,
}

// seedConversation stores tenant/env, user and a conversation of theirs.
func seedConversation(t *testing.T, s store.Store, tenant, env, user, conv string) {
	t.Helper()
	seed(t, s, tenant, env, user)
	_, _, err := s.CreateConversation(t.Context(), store.Conversation{ID: conv, Tenant: tenant, Env: env, UserID: user, CreatedAt: t0})
	must(t, err)
}

// issue is an issue of acme/prod, user u1, conversation conv.
func issue(id, key, conv string, d time.Duration) store.Issue {
	return store.Issue{
		ID: id, Tenant: "acme", Env: "prod", ConversationID: conv, UserID: "u1", TurnID: "t1",
		IdempotencyKey: key, Title: "Title " + id, Body: "Body of " + id, Severity: "high",
		Labels: []string{"ci", "flaky"}, Status: "open", CreatedAt: at(d), UpdatedAt: at(d),
	}
}

// stored is i as a store returns it.
func stored(i store.Issue, comments ...store.IssueComment) store.Issue {
	i.CreatedAt, i.UpdatedAt = ms(i.CreatedAt), ms(i.UpdatedAt)
	i.Comments = comments
	return i
}

func comment(id, issueID, key string, d time.Duration) store.IssueComment {
	return store.IssueComment{ID: id, IssueID: issueID, TurnID: "t2", IdempotencyKey: key, Body: "Comment " + id, CreatedAt: at(d)}
}

func storedComment(c store.IssueComment) store.IssueComment {
	c.CreatedAt = ms(c.CreatedAt)
	return c
}

func issueIDs(is []store.Issue) []string {
	var ids []string
	for _, i := range is {
		ids = append(ids, i.ID)
	}
	return ids
}

func testIssues(t *testing.T, s store.Store) {
	ctx := t.Context()
	seedConversation(t, s, "acme", "prod", "u1", "c1")
	_, _, err := s.CreateConversation(ctx, store.Conversation{ID: "c2", Tenant: "acme", Env: "prod", UserID: "u1", CreatedAt: t0})
	must(t, err)
	seedConversation(t, s, "acme", "staging", "u1", "c3")

	i1 := issue("i1", "k1", "c1", time.Minute)
	i1.Labels = []string{"ci", "ünïcødé 😀", "a,b \"quoted\""}
	got, created, err := s.CreateIssue(ctx, i1)
	wantCreate(t, "CreateIssue", got, created, err, true, stored(i1))
	checkUTC(t, "CreateIssue", got.CreatedAt, got.UpdatedAt)

	// A retry with the same key, whatever else it says, returns the first.
	retry := issue("i1-retry", "k1", "c1", time.Hour)
	retry.Title = "changed"
	got, created, err = s.CreateIssue(ctx, retry)
	wantCreate(t, "CreateIssue with a stored key", got, created, err, false, stored(i1))

	// No labels round-trip as none.
	i2 := issue("i2", "k2", "c1", 2*time.Minute)
	i2.Labels = nil
	_, _, err = s.CreateIssue(ctx, i2)
	must(t, err)
	got, err = s.GetIssue(ctx, "i2")
	must(t, err)
	if diff := cmp.Diff(stored(i2), got, opts); diff != "" {
		t.Errorf("GetIssue without labels (-want +got):\n%s", diff)
	}
	got, err = s.GetIssue(ctx, "i1")
	must(t, err)
	if diff := cmp.Diff(stored(i1), got, opts); diff != "" {
		t.Errorf("GetIssue (-want +got):\n%s", diff)
	}
	checkUTC(t, "GetIssue", got.CreatedAt, got.UpdatedAt)

	// The same key under another tenant-env is another issue.
	other := issue("i3", "k1", "c3", 3*time.Minute)
	other.Env = "staging"
	got, created, err = s.CreateIssue(ctx, other)
	must(t, err)
	if !created || got.ID != "i3" {
		t.Errorf("CreateIssue of key k1 in acme/staging: created %v, id %s; want a new issue i3", created, got.ID)
	}

	refused := map[string]struct {
		i    store.Issue
		want error
	}{
		"key of another conversation": {issue("i4", "k1", "c2", 0), store.ErrConflict},
		"id taken":                    {issue("i1", "k5", "c1", 0), store.ErrConflict},
		"unknown conversation":        {issue("i6", "k6", "nope", 0), store.ErrNotFound},
		"unknown user": {func() store.Issue {
			i := issue("i7", "k7", "c1", 0)
			i.UserID = "nope"
			return i
		}(), store.ErrNotFound},
		"unknown env": {func() store.Issue {
			i := issue("i8", "k8", "c1", 0)
			i.Env = "nope"
			return i
		}(), store.ErrNotFound},
	}
	for name, tt := range refused {
		t.Run("Create "+name, func(t *testing.T) {
			_, _, err := s.CreateIssue(ctx, tt.i)
			wantErr(t, "CreateIssue", err, tt.want)
		})
	}
	_, err = s.GetIssue(ctx, "nope")
	wantErr(t, "GetIssue of an unknown issue", err, store.ErrNotFound)
	is, err := s.ListIssues(ctx, "c2", "", 0)
	must(t, err)
	if len(is) != 0 {
		t.Errorf("refused issues were stored: %v", issueIDs(is))
	}
}

func testIssueComments(t *testing.T, s store.Store) {
	ctx := t.Context()
	seedConversation(t, s, "acme", "prod", "u1", "c1")
	i1 := issue("i1", "k1", "c1", 0)
	_, _, err := s.CreateIssue(ctx, i1)
	must(t, err)

	c1 := comment("cm1", "i1", "ck1", time.Minute)
	got, created, err := s.AddIssueComment(ctx, c1)
	wantCreate(t, "AddIssueComment", got, created, err, true, storedComment(c1))
	checkUTC(t, "AddIssueComment", got.CreatedAt)

	// A retry returns the first and changes nothing, not even the status.
	retry := comment("cm1-retry", "i1", "ck1", time.Hour)
	retry.Status = "closed"
	got, created, err = s.AddIssueComment(ctx, retry)
	wantCreate(t, "AddIssueComment with a stored key", got, created, err, false, storedComment(c1))

	// A comment that closes the issue; then one stamped earlier, which
	// still comes after it and does not move UpdatedAt back.
	c2 := comment("cm2", "i1", "ck2", 2*time.Minute)
	c2.Status = "closed"
	_, _, err = s.AddIssueComment(ctx, c2)
	must(t, err)
	c3 := comment("cm3", "i1", "ck3", -time.Minute)
	_, _, err = s.AddIssueComment(ctx, c3)
	must(t, err)

	want := i1
	want.Status = "closed"
	want.UpdatedAt = at(2 * time.Minute)
	wantIssue := stored(want, storedComment(c1), storedComment(c2), storedComment(c3))
	gotIssue, err := s.GetIssue(ctx, "i1")
	must(t, err)
	if diff := cmp.Diff(wantIssue, gotIssue, opts); diff != "" {
		t.Errorf("GetIssue (-want +got):\n%s", diff)
	}
	for _, c := range gotIssue.Comments {
		checkUTC(t, "GetIssue comment", c.CreatedAt)
	}
	list, err := s.ListIssues(ctx, "c1", "", 0)
	must(t, err)
	if diff := cmp.Diff([]store.Issue{wantIssue}, list, opts); diff != "" {
		t.Errorf("ListIssues (-want +got):\n%s", diff)
	}
	// Creating with the key again returns the issue with its comments.
	again, _, err := s.CreateIssue(ctx, issue("i1-again", "k1", "c1", time.Hour))
	must(t, err)
	if diff := cmp.Diff(wantIssue, again, opts); diff != "" {
		t.Errorf("CreateIssue with a stored key (-want +got):\n%s", diff)
	}

	// Reopened.
	c4 := comment("cm4", "i1", "ck4", 3*time.Minute)
	c4.Status = "open"
	_, _, err = s.AddIssueComment(ctx, c4)
	must(t, err)
	gotIssue, err = s.GetIssue(ctx, "i1")
	must(t, err)
	if gotIssue.Status != "open" || !gotIssue.UpdatedAt.Equal(ms(at(3*time.Minute))) || len(gotIssue.Comments) != 4 {
		t.Errorf("after reopening: status %s, updated %v, %d comments; want open, %v, 4", gotIssue.Status, gotIssue.UpdatedAt, len(gotIssue.Comments), ms(at(3*time.Minute)))
	}

	_, _, err = s.AddIssueComment(ctx, comment("cm5", "nope", "ck5", 0))
	wantErr(t, "AddIssueComment on an unknown issue", err, store.ErrNotFound)
	_, _, err = s.AddIssueComment(ctx, comment("cm1", "i1", "ck6", 0))
	wantErr(t, "AddIssueComment with a taken id", err, store.ErrConflict)
}

func testIssueList(t *testing.T, s store.Store) {
	ctx := t.Context()
	seedConversation(t, s, "acme", "prod", "u1", "c1")
	_, _, err := s.CreateConversation(ctx, store.Conversation{ID: "c2", Tenant: "acme", Env: "prod", UserID: "u1", CreatedAt: t0})
	must(t, err)

	// Created in an order that is not the listing's; "b" and "B" at one
	// time order by ID, by bytes.
	for _, i := range []store.Issue{
		issue("a", "ka", "c1", time.Minute),
		issue("b", "kb", "c1", 3*time.Minute),
		issue("B", "kB", "c1", 3*time.Minute),
		issue("c", "kc", "c1", 2*time.Minute),
		issue("x", "kx", "c2", 4*time.Minute),
	} {
		_, _, err := s.CreateIssue(ctx, i)
		must(t, err)
	}
	c := comment("cm1", "c", "ck1", 5*time.Minute)
	c.Status = "closed"
	_, _, err = s.AddIssueComment(ctx, c)
	must(t, err)

	tests := map[string]struct {
		conv, status string
		limit        int
		want         []string
	}{
		"all":                  {"c1", "", 0, []string{"b", "B", "c", "a"}},
		"open":                 {"c1", "open", 0, []string{"b", "B", "a"}},
		"closed":               {"c1", "closed", 0, []string{"c"}},
		"limit":                {"c1", "", 2, []string{"b", "B"}},
		"limit above count":    {"c1", "", 10, []string{"b", "B", "c", "a"}},
		"other conversation":   {"c2", "", 0, []string{"x"}},
		"unknown conversation": {"nope", "", 0, nil},
		"unknown status":       {"c1", "nope", 0, nil},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := s.ListIssues(ctx, tt.conv, tt.status, tt.limit)
			must(t, err)
			if diff := cmp.Diff(tt.want, issueIDs(got), opts); diff != "" {
				t.Errorf("ListIssues ids (-want +got):\n%s", diff)
			}
			for _, i := range got {
				checkUTC(t, "ListIssues", i.CreatedAt, i.UpdatedAt)
				if want := map[string]int{"c": 1}[i.ID]; len(i.Comments) != want {
					t.Errorf("issue %s: %d comments, want %d", i.ID, len(i.Comments), want)
				}
			}
		})
	}
}

// testIssuesConcurrent files one issue from many goroutines at once, as a
// worker's retries racing each other would: it is stored once.
func testIssuesConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	seedConversation(t, s, "acme", "prod", "u1", "c1")
	const workers = 16
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex // guards created, ids
		created int
		ids     = map[string]bool{}
	)
	for w := range workers {
		wg.Go(func() {
			got, c, err := s.CreateIssue(ctx, issue(fmt.Sprintf("i%02d", w), "k", "c1", 0))
			if err != nil {
				t.Errorf("CreateIssue: %v", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[got.ID] = true
			if c {
				created++
			}
		})
	}
	wg.Wait()
	if created != 1 || len(ids) != 1 {
		t.Errorf("CreateIssue from %d workers: created %d, returned ids %v; want one issue", workers, created, ids)
	}
}

// testIssueCommentsConcurrent comments on one issue from many goroutines:
// distinct keys all land, in some order, without failing on the order
// column; one key lands once.
func testIssueCommentsConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	seedConversation(t, s, "acme", "prod", "u1", "c1")
	_, _, err := s.CreateIssue(ctx, issue("i1", "k1", "c1", 0))
	must(t, err)
	const workers = 16
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex // guards created
		created int
	)
	for w := range workers {
		wg.Go(func() {
			if _, _, err := s.AddIssueComment(ctx, comment(fmt.Sprintf("cm%02d", w), "i1", fmt.Sprintf("ck%02d", w), time.Second)); err != nil {
				t.Errorf("AddIssueComment: %v", err)
			}
			_, c, err := s.AddIssueComment(ctx, comment(fmt.Sprintf("same%02d", w), "i1", "same", time.Second))
			if err != nil {
				t.Errorf("AddIssueComment with a shared key: %v", err)
				return
			}
			if c {
				mu.Lock()
				created++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if created != 1 {
		t.Errorf("AddIssueComment with one key from %d workers: created %d times, want 1", workers, created)
	}
	got, err := s.GetIssue(ctx, "i1")
	must(t, err)
	if len(got.Comments) != workers+1 {
		t.Errorf("GetIssue: %d comments, want %d", len(got.Comments), workers+1)
	}
}

// wantCreate checks what an idempotent create returned: want, created or,
// for a retry of a stored key, not.
func wantCreate[T any](t *testing.T, what string, got T, created bool, err error, wantCreated bool, want T) {
	t.Helper()
	must(t, err)
	if created != wantCreated {
		t.Errorf("%s: created = %v, want %v", what, created, wantCreated)
	}
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}
