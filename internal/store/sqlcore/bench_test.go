package sqlcore_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/postgres"
	"github.com/talkide/platform/internal/store/postgres/pgtest"
	"github.com/talkide/platform/internal/store/sqlite"
)

// stores opens each store, empty, for a test or benchmark: a SQLite file,
// an in-memory SQLite database and, in a schema of its own in the database
// of TALKIDE_TEST_DATABASE_URL, PostgreSQL.
var stores = map[string]func(tb testing.TB) store.Store{
	"sqlite":        func(tb testing.TB) store.Store { return openSQLite(tb, filepath.Join(tb.TempDir(), "talkide.db")) },
	"sqlite-memory": func(tb testing.TB) store.Store { return openSQLite(tb, ":memory:") },
	"postgres": func(tb testing.TB) store.Store {
		s, err := postgres.Open(tb.Context(), pgtest.URL(tb), nil)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { s.Close() })
		return s
	},
}

func openSQLite(tb testing.TB, path string) store.Store {
	s, err := sqlite.Open(tb.Context(), path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// benchConversations is how many conversations the user ada has.
const benchConversations = 100

// seed fills s with an env, a token, a user with benchConversations
// conversations, and in c0 usage, reports and issues with comments.
func seed(b *testing.B, s store.Store) {
	b.Helper()
	ctx := b.Context()
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	must := func(err error) {
		b.Helper()
		if err != nil {
			b.Fatal(err)
		}
	}
	must(s.PutEnv(ctx, store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://w:8080", CreatedAt: t0}))
	must(s.AddIdentityToken(ctx, store.IdentityToken{ID: "tok", Tenant: "acme", Env: "prod", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}))
	must(s.PutUser(ctx, store.User{ID: "ada", Name: "Ada", CreatedAt: t0}))
	for i := range benchConversations {
		_, _, err := s.CreateConversation(ctx, store.Conversation{ID: fmt.Sprint("c", i), Tenant: "acme", Env: "prod",
			UserID: "ada", Title: "a title", CreatedAt: t0.Add(time.Duration(i) * time.Second)})
		must(err)
	}
	var us []store.UsageRecord
	var rs []contract.Report
	for i := range 20 {
		us = append(us, usage(fmt.Sprint("seed-u", i), t0))
		rs = append(rs, report(fmt.Sprint("seed-r", i), t0))
	}
	must(s.RecordUsages(ctx, us))
	if _, _, err := s.AddReports(ctx, "acme", "prod", rs, t0); err != nil {
		b.Fatal(err)
	}
	for i := range 5 {
		is, _, err := s.CreateIssue(ctx, issue(fmt.Sprint("seed-i", i), t0))
		must(err)
		for k := range 2 {
			_, _, err := s.AddIssueComment(ctx, comment(fmt.Sprint("seed-i", i, "-", k), is.ID, t0))
			must(err)
		}
	}
}

func usage(id string, t0 time.Time) store.UsageRecord {
	return store.UsageRecord{ID: id, Tenant: "acme", Env: "prod", ConversationID: "c0", UserID: "ada",
		Model: "claude", Status: 200, Streamed: true, InputTokens: 1000, OutputTokens: 200,
		CacheReadInputTokens: 5000, StartedAt: t0, Duration: 2 * time.Second}
}

func report(key string, t0 time.Time) contract.Report {
	return contract.Report{IdempotencyKey: key, Kind: "turn.finished", ConversationID: "c0", TurnID: "t1", Time: t0}
}

func issue(id string, t0 time.Time) store.Issue {
	return store.Issue{ID: id, Tenant: "acme", Env: "prod", ConversationID: "c0", UserID: "ada", TurnID: "t1",
		IdempotencyKey: "key-" + id, Title: "a title", Body: "a body", Severity: "minor",
		Labels: []string{"a", "b"}, Status: "open", CreatedAt: t0, UpdatedAt: t0}
}

func comment(id, issueID string, t0 time.Time) store.IssueComment {
	return store.IssueComment{ID: id, IssueID: issueID, TurnID: "t1", IdempotencyKey: "key-" + id,
		Body: "a comment", CreatedAt: t0}
}

// BenchmarkStore runs each CRUD method of store.Store on both stores: the
// reads on a seeded store, the writes each with new keys (and the
// idempotent ones also with keys stored already).
func BenchmarkStore(b *testing.B) {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			s := stores[name](b)
			seed(b, s)
			ctx := b.Context()
			n := 0
			next := func(prefix string) string {
				n++
				return fmt.Sprint(prefix, n)
			}
			ops := []struct {
				name string
				op   func() error
			}{
				{"GetEnv", func() error { _, err := s.GetEnv(ctx, "acme", "prod"); return err }},
				{"ListEnvs", func() error { _, err := s.ListEnvs(ctx); return err }},
				{"GetIdentityToken", func() error { _, err := s.GetIdentityToken(ctx, "tok"); return err }},
				{"GetUser", func() error { _, err := s.GetUser(ctx, "ada"); return err }},
				{"GetConversation", func() error {
					_, err := s.GetConversation(ctx, fmt.Sprint("c", n%benchConversations))
					n++
					return err
				}},
				{"ListConversations", func() error { _, err := s.ListConversations(ctx, "ada"); return err }},
				{"ListUsage", func() error { _, err := s.ListUsage(ctx, "c0"); return err }},
				{"ListReports", func() error { _, err := s.ListReports(ctx, "c0"); return err }},
				{"GetIssue", func() error { _, err := s.GetIssue(ctx, "seed-i0"); return err }},
				{"ListIssues", func() error { _, err := s.ListIssues(ctx, "c0", "", 0); return err }},
				{"ListIssues/status+limit", func() error { _, err := s.ListIssues(ctx, "c0", "open", 3); return err }},
				{"PutUser/existing", func() error { return s.PutUser(ctx, store.User{ID: "ada", Name: "Ada"}) }},
				{"RevokeIdentityToken", func() error { return s.RevokeIdentityToken(ctx, "tok", t0) }},
				{"CreateConversation/new", func() error {
					_, _, err := s.CreateConversation(ctx, store.Conversation{ID: next("new-c"), Tenant: "acme", Env: "prod", UserID: "ada", CreatedAt: t0})
					return err
				}},
				{"CreateConversation/existing", func() error {
					_, _, err := s.CreateConversation(ctx, store.Conversation{ID: "c1", Tenant: "acme", Env: "prod", UserID: "ada"})
					return err
				}},
				{"RecordUsage", func() error { return s.RecordUsage(ctx, usage(next("u"), t0)) }},
				{"RecordUsages/16", func() error {
					us := make([]store.UsageRecord, 16)
					for i := range us {
						us[i] = usage(next("us"), t0)
					}
					return s.RecordUsages(ctx, us)
				}},
				{"AddReports/8", func() error {
					rs := make([]contract.Report, 8)
					for i := range rs {
						rs[i] = report(next("r"), t0)
					}
					_, _, err := s.AddReports(ctx, "acme", "prod", rs, t0)
					return err
				}},
				{"CreateIssue/new", func() error { _, _, err := s.CreateIssue(ctx, issue(next("i"), t0)); return err }},
				{"CreateIssue/existing", func() error { _, _, err := s.CreateIssue(ctx, issue("seed-i1", t0)); return err }},
				{"AddIssueComment/new", func() error {
					_, _, err := s.AddIssueComment(ctx, comment(next("ic"), "seed-i2", t0))
					return err
				}},
			}
			for _, o := range ops {
				b.Run(o.name, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if err := o.op(); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

// BenchmarkSearch searches a user's 200 conversations of 50 texts each
// (10,000 texts of about 300 bytes, 1 in 100 holding the rare word),
// beside another user's as many, on each store.
func BenchmarkSearch(b *testing.B) {
	const convs, texts = 200, 50
	vocabulary := []string{"build", "deploy", "scheduler", "test", "cache", "config", "error", "retry", "timeout", "service", "database", "index"}
	for name, open := range stores {
		b.Run(name, func(b *testing.B) {
			s := open(b)
			ctx := b.Context()
			t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
			if err := s.PutEnv(ctx, store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://w:8080", CreatedAt: t0}); err != nil {
				b.Fatal(err)
			}
			for _, u := range []string{"ada", "bob"} {
				if err := s.PutUser(ctx, store.User{ID: u, Name: u, CreatedAt: t0}); err != nil {
					b.Fatal(err)
				}
				for i := range convs {
					id := fmt.Sprintf("%s-c%d", u, i)
					if _, _, err := s.CreateConversation(ctx, store.Conversation{ID: id, Tenant: "acme", Env: "prod", UserID: u, CreatedAt: t0}); err != nil {
						b.Fatal(err)
					}
					for j := range texts {
						var body []byte
						for k := range 40 {
							body = fmt.Appendf(body, "%s ", vocabulary[(i*7+j*3+k)%len(vocabulary)])
						}
						if (i*texts+j)%100 == 0 {
							body = append(body, "quokka"...)
						}
						if _, err := s.AddConversationText(ctx, store.ConversationText{ConversationID: id, Key: fmt.Sprint("m/", j), Kind: store.TextUser, Body: string(body), At: t0}); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			for q, want := range map[string]int{"quokka": 20, "sched": 20, "deploy retry": 20} {
				b.Run(q, func(b *testing.B) {
					for b.Loop() {
						hs, err := s.SearchConversations(ctx, "ada", q, 20)
						if err != nil || len(hs) != want {
							b.Fatalf("%d hits, %v; want %d", len(hs), err, want)
						}
					}
				})
			}
		})
	}
}
