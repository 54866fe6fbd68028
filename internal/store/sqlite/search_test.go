package sqlite

import (
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/storetest"
)

// FuzzSearch runs any query a user may type against FTS5: no query is an
// error (FTS5's syntax would make `"`, `*`, NEAR or a bare AND one), and
// none changes the data.
func FuzzSearch(f *testing.F) {
	for _, s := range []string{`"`, `*`, `NEAR(a b)`, `a AND`, `-a`, `body:a`, "\xff", `'; DROP TABLE conversations; --`, strings.Repeat("a ", 100)} {
		f.Add(s)
	}
	s := storetest.Open(f, Open, ":memory:")
	ctx := f.Context()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	must := func(err error) {
		if err != nil {
			f.Fatal(err)
		}
	}
	must(s.PutEnv(ctx, store.Env{Tenant: "t", Name: "e", WorkerURL: "http://w", CreatedAt: now}))
	must(s.PutUser(ctx, store.User{ID: "u", Name: "u", CreatedAt: now}))
	_, _, err := s.CreateConversation(ctx, store.Conversation{ID: "c", Tenant: "t", Env: "e", UserID: "u", Title: "A title", CreatedAt: now})
	must(err)
	_, err = s.AddConversationText(ctx, store.ConversationText{ConversationID: "c", Key: "m", Kind: store.TextUser, Body: "a body of text", At: now})
	must(err)
	f.Fuzz(func(t *testing.T, q string) {
		if _, err := s.SearchConversations(ctx, "u", q, 5); err != nil {
			t.Fatalf("SearchConversations(%q): %v", q, err)
		}
		if hs, err := s.SearchConversations(ctx, "u", "body", 5); err != nil || len(hs) != 1 {
			t.Fatalf("after %q: %d hits, %v", q, len(hs), err)
		}
	})
}
