// Package storetest is the conformance suite of store.Store: every
// implementation (sqlite, postgres) runs Run and so keeps the same semantics.
// It tests what the interface promises, never how it is stored.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/store"
)

// Run runs the suite. open returns a new, empty store for the test t and
// arranges with t.Cleanup to close it; Run calls it once per subtest.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := map[string]func(*testing.T, store.Store){
		"Envs":                 testEnvs,
		"EnvScale":             testEnvScale,
		"IdentityTokens":       testIdentityTokens,
		"Users":                testUsers,
		"Conversations":        testConversations,
		"ConversationList":     testConversationList,
		"ConversationUpdate":   testConversationUpdate,
		"ConversationActivity": testConversationActivity,
		"Usage":                testUsage,
		"UsageBatch":           testUsageBatch,
		"UsageBatchOrders":     testUsageBatchOrders,
		"Reports":              testReports,
		"ReportsTenantEnvs":    testReportsTenantEnvs,
		"ReportsRoundTrip":     testReportsRoundTrip,
		"NotFound":             testNotFound,
		"Concurrent":           testConcurrent,
		"ConcurrentOrders":     testConcurrentOrders,
		"ByteOrder":            testByteOrder,
		"ReportPages":          testReportPages,
		"UsagePages":           testUsagePages,
	}
	for name, test := range issueTests {
		tests[name] = test
	}
	for name, test := range accountTests {
		tests[name] = test
	}
	for name, test := range searchTests {
		tests[name] = test
	}
	for name, test := range streamTests {
		tests[name] = test
	}
	for name, test := range tests {
		t.Run(name, func(t *testing.T) {
			test(t, open(t))
		})
	}
}

// t0 has nanoseconds and is not in UTC: what a store returns is t0 in UTC
// to the millisecond.
var t0 = time.Date(2025, 3, 1, 14, 30, 0, 123_456_789, time.FixedZone("CET", 3600))

// at is t0 plus d.
func at(d time.Duration) time.Time { return t0.Add(d) }

// ms is t as a store returns it.
func ms(t time.Time) time.Time { return t.Truncate(time.Millisecond).UTC() }

// opts compares times with Equal and treats nil and empty slices alike.
var opts = cmp.Options{cmpopts.EquateEmpty()}

// checkUTC fails unless every time in ts is in UTC (or zero).
func checkUTC(t *testing.T, what string, ts ...time.Time) {
	t.Helper()
	for _, tt := range ts {
		if !tt.IsZero() && tt.Location() != time.UTC {
			t.Errorf("%s: time %v is in %v, want UTC", what, tt, tt.Location())
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: error %v, want %v", what, err, want)
	}
}

// seed stores env t/e and user u, the parents a conversation needs.
func seed(t *testing.T, s store.Store, tenant, env, user string) {
	t.Helper()
	ctx := t.Context()
	must(t, s.PutEnv(ctx, store.Env{Tenant: tenant, Name: env, WorkerURL: "http://worker." + tenant + "-" + env + ":8080", CreatedAt: t0}))
	must(t, s.PutUser(ctx, store.User{ID: user, Name: "User " + user, CreatedAt: t0}))
}

func testEnvs(t *testing.T, s store.Store) {
	ctx := t.Context()

	got, err := s.ListEnvs(ctx)
	must(t, err)
	if len(got) != 0 {
		t.Fatalf("ListEnvs on an empty store = %v, want none", got)
	}

	// Put in an order that is not the listing's.
	puts := []store.Env{
		{Tenant: "beta", Name: "prod", WorkerURL: "http://b-prod:8080", CreatedAt: at(3 * time.Hour)},
		{Tenant: "acme", Name: "staging", WorkerURL: "http://a-staging:8080", CreatedAt: at(2 * time.Hour)},
		{Tenant: "acme", Name: "prod", WorkerURL: "http://a-prod:8080", CreatedAt: at(time.Hour)},
		{Tenant: "beta", Name: "dev", WorkerURL: "http://b-dev:8080", CreatedAt: at(0)},
	}
	for _, e := range puts {
		must(t, s.PutEnv(ctx, e))
	}

	tests := map[string]struct {
		tenant, env string
		want        store.Env
	}{
		"acme/prod":    {"acme", "prod", store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://a-prod:8080", CreatedAt: ms(at(time.Hour))}},
		"acme/staging": {"acme", "staging", store.Env{Tenant: "acme", Name: "staging", WorkerURL: "http://a-staging:8080", CreatedAt: ms(at(2 * time.Hour))}},
		"beta/prod":    {"beta", "prod", store.Env{Tenant: "beta", Name: "prod", WorkerURL: "http://b-prod:8080", CreatedAt: ms(at(3 * time.Hour))}},
	}
	for name, tt := range tests {
		t.Run("Get "+name, func(t *testing.T) {
			got, err := s.GetEnv(ctx, tt.tenant, tt.env)
			must(t, err)
			if diff := cmp.Diff(tt.want, got, opts); diff != "" {
				t.Errorf("GetEnv (-want +got):\n%s", diff)
			}
			checkUTC(t, "GetEnv", got.CreatedAt)
		})
	}

	// An update changes the WorkerURL only.
	must(t, s.PutEnv(ctx, store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://a-prod-2:8080", CreatedAt: at(99 * time.Hour)}))
	got1, err := s.GetEnv(ctx, "acme", "prod")
	must(t, err)
	want1 := store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://a-prod-2:8080", CreatedAt: ms(at(time.Hour))}
	if diff := cmp.Diff(want1, got1, opts); diff != "" {
		t.Errorf("GetEnv after update (-want +got):\n%s", diff)
	}

	got, err = s.ListEnvs(ctx)
	must(t, err)
	want := []store.Env{
		want1,
		{Tenant: "acme", Name: "staging", WorkerURL: "http://a-staging:8080", CreatedAt: ms(at(2 * time.Hour))},
		{Tenant: "beta", Name: "dev", WorkerURL: "http://b-dev:8080", CreatedAt: ms(at(0))},
		{Tenant: "beta", Name: "prod", WorkerURL: "http://b-prod:8080", CreatedAt: ms(at(3 * time.Hour))},
	}
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("ListEnvs (-want +got):\n%s", diff)
	}
	for _, e := range got {
		checkUTC(t, "ListEnvs", e.CreatedAt)
	}

	_, err = s.GetEnv(ctx, "acme", "dev")
	wantErr(t, "GetEnv of an env of another tenant", err, store.ErrNotFound)

	// Retiring keeps the first time; putting the env again revives it.
	must(t, s.RetireEnv(ctx, "beta", "dev", at(time.Hour)))
	must(t, s.RetireEnv(ctx, "beta", "dev", at(2*time.Hour)))
	got1, err = s.GetEnv(ctx, "beta", "dev")
	must(t, err)
	if want := ms(at(time.Hour)); !got1.RetiredAt.Equal(want) {
		t.Errorf("RetiredAt = %v, want %v", got1.RetiredAt, want)
	}
	checkUTC(t, "GetEnv", got1.RetiredAt)
	got, err = s.ListEnvs(ctx)
	must(t, err)
	if !got[2].RetiredAt.Equal(ms(at(time.Hour))) || !got[3].RetiredAt.IsZero() {
		t.Errorf("ListEnvs after retiring beta/dev = %+v", got)
	}
	must(t, s.PutEnv(ctx, store.Env{Tenant: "beta", Name: "dev", WorkerURL: "http://b-dev:8080", CreatedAt: at(5 * time.Hour)}))
	got1, err = s.GetEnv(ctx, "beta", "dev")
	must(t, err)
	if !got1.RetiredAt.IsZero() || !got1.CreatedAt.Equal(ms(at(0))) {
		t.Errorf("GetEnv after putting a retired env again = %+v", got1)
	}
	wantErr(t, "RetireEnv of an unknown env", s.RetireEnv(ctx, "acme", "dev", at(0)), store.ErrNotFound)
}

func testIdentityTokens(t *testing.T, s store.Store) {
	ctx := t.Context()
	seed(t, s, "acme", "prod", "u1")

	tok := store.IdentityToken{
		ID:        "tok1",
		Tenant:    "acme",
		Env:       "prod",
		Hash:      [32]byte{0x00, 0x01, 0xfe, 0xff, 31: 0xab},
		CreatedAt: at(0),
		ExpiresAt: at(24 * time.Hour),
	}
	must(t, s.AddIdentityToken(ctx, tok))
	want := tok
	want.CreatedAt, want.ExpiresAt = ms(tok.CreatedAt), ms(tok.ExpiresAt)

	got, err := s.GetIdentityToken(ctx, "tok1")
	must(t, err)
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("GetIdentityToken (-want +got):\n%s", diff)
	}
	if !got.RevokedAt.IsZero() {
		t.Errorf("RevokedAt of a new token = %v, want zero", got.RevokedAt)
	}
	checkUTC(t, "GetIdentityToken", got.CreatedAt, got.ExpiresAt)

	adds := map[string]struct {
		tok  store.IdentityToken
		want error
	}{
		"same id":        {store.IdentityToken{ID: "tok1", Tenant: "acme", Env: "prod", CreatedAt: at(0), ExpiresAt: at(time.Hour)}, store.ErrConflict},
		"unknown env":    {store.IdentityToken{ID: "tok2", Tenant: "acme", Env: "nope", CreatedAt: at(0), ExpiresAt: at(time.Hour)}, store.ErrNotFound},
		"unknown tenant": {store.IdentityToken{ID: "tok3", Tenant: "nope", Env: "prod", CreatedAt: at(0), ExpiresAt: at(time.Hour)}, store.ErrNotFound},
	}
	for name, tt := range adds {
		t.Run("Add "+name, func(t *testing.T) {
			wantErr(t, "AddIdentityToken", s.AddIdentityToken(ctx, tt.tok), tt.want)
		})
	}
	// The refused token with the same id changed nothing.
	got, err = s.GetIdentityToken(ctx, "tok1")
	must(t, err)
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("GetIdentityToken after a refused add (-want +got):\n%s", diff)
	}

	// Revoking keeps the earliest time: a later revocation changes
	// nothing, an earlier one (ending a grace period early) wins.
	must(t, s.RevokeIdentityToken(ctx, "tok1", at(2*time.Hour)))
	must(t, s.RevokeIdentityToken(ctx, "tok1", at(3*time.Hour)))
	must(t, s.RevokeIdentityToken(ctx, "tok1", at(time.Hour)))
	got, err = s.GetIdentityToken(ctx, "tok1")
	must(t, err)
	want.RevokedAt = ms(at(time.Hour))
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("GetIdentityToken after revoking (-want +got):\n%s", diff)
	}
	checkUTC(t, "GetIdentityToken", got.RevokedAt)

	// A token added already revoked stays so.
	revoked := store.IdentityToken{ID: "tok4", Tenant: "acme", Env: "prod", CreatedAt: at(0), ExpiresAt: at(time.Hour), RevokedAt: at(time.Minute)}
	must(t, s.AddIdentityToken(ctx, revoked))
	got, err = s.GetIdentityToken(ctx, "tok4")
	must(t, err)
	if want := ms(at(time.Minute)); !got.RevokedAt.Equal(want) {
		t.Errorf("RevokedAt of a token added revoked = %v, want %v", got.RevokedAt, want)
	}

	// The env's tokens, oldest first; another env's are not among them.
	seed(t, s, "acme", "staging", "u1")
	must(t, s.AddIdentityToken(ctx, store.IdentityToken{ID: "tok0", Tenant: "acme", Env: "prod", CreatedAt: at(-time.Hour), ExpiresAt: at(time.Hour)}))
	must(t, s.AddIdentityToken(ctx, store.IdentityToken{ID: "tok9", Tenant: "acme", Env: "staging", CreatedAt: at(0), ExpiresAt: at(time.Hour)}))
	list, err := s.ListIdentityTokens(ctx, "acme", "prod")
	must(t, err)
	var ids []string
	for _, it := range list {
		ids = append(ids, it.ID)
	}
	if diff := cmp.Diff([]string{"tok0", "tok1", "tok4"}, ids); diff != "" {
		t.Errorf("ListIdentityTokens ids (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, list[1], opts); diff != "" {
		t.Errorf("ListIdentityTokens[1] (-want +got):\n%s", diff)
	}
	list, err = s.ListIdentityTokens(ctx, "acme", "nope")
	must(t, err)
	if len(list) != 0 {
		t.Errorf("ListIdentityTokens of an unknown env = %v, want none", list)
	}
}

func testUsers(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := store.User{ID: "u1", Name: "Ada", CreatedAt: at(0)}
	must(t, s.PutUser(ctx, u))
	// A second put leaves the user as it was.
	must(t, s.PutUser(ctx, store.User{ID: "u1", Name: "Grace", CreatedAt: at(time.Hour)}))
	must(t, s.PutUser(ctx, store.User{ID: "u2", Name: "Grace", CreatedAt: at(time.Hour)}))

	tests := map[string]store.User{
		"u1": {ID: "u1", Name: "Ada", CreatedAt: ms(at(0))},
		"u2": {ID: "u2", Name: "Grace", CreatedAt: ms(at(time.Hour))},
	}
	for id, want := range tests {
		got, err := s.GetUser(ctx, id)
		must(t, err)
		if diff := cmp.Diff(want, got, opts); diff != "" {
			t.Errorf("GetUser(%s) (-want +got):\n%s", id, diff)
		}
		checkUTC(t, "GetUser", got.CreatedAt)
	}
}

func testConversations(t *testing.T, s store.Store) {
	ctx := t.Context()
	seed(t, s, "acme", "prod", "u1")
	seed(t, s, "acme", "staging", "u2")
	seed(t, s, "beta", "prod", "u3")

	c := store.Conversation{ID: "c1", Tenant: "acme", Env: "prod", UserID: "u1", Title: "First", CreatedAt: at(0)}
	want := c
	want.CreatedAt = ms(c.CreatedAt)
	want.LastActivityAt = want.CreatedAt // a new conversation's activity starts at its creation

	got, created, err := s.CreateConversation(ctx, c)
	must(t, err)
	if !created {
		t.Error("CreateConversation of a new conversation: created = false")
	}
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("CreateConversation (-want +got):\n%s", diff)
	}
	checkUTC(t, "CreateConversation", got.CreatedAt)

	tests := map[string]struct {
		c       store.Conversation
		wantErr error // nil: an idempotent re-create returning want
	}{
		"same":                    {c: c},
		"same with another title": {c: store.Conversation{ID: "c1", Tenant: "acme", Env: "prod", UserID: "u1", Title: "Other", CreatedAt: at(time.Hour)}},
		"another user":            {c: store.Conversation{ID: "c1", Tenant: "acme", Env: "prod", UserID: "u2", CreatedAt: at(0)}, wantErr: store.ErrConflict},
		"another env":             {c: store.Conversation{ID: "c1", Tenant: "acme", Env: "staging", UserID: "u1", CreatedAt: at(0)}, wantErr: store.ErrConflict},
		"another tenant":          {c: store.Conversation{ID: "c1", Tenant: "beta", Env: "prod", UserID: "u1", CreatedAt: at(0)}, wantErr: store.ErrConflict},
		"new with unknown env":    {c: store.Conversation{ID: "c2", Tenant: "acme", Env: "nope", UserID: "u1", CreatedAt: at(0)}, wantErr: store.ErrNotFound},
		"new with unknown tenant": {c: store.Conversation{ID: "c3", Tenant: "nope", Env: "prod", UserID: "u1", CreatedAt: at(0)}, wantErr: store.ErrNotFound},
		"new with unknown user":   {c: store.Conversation{ID: "c4", Tenant: "acme", Env: "prod", UserID: "nobody", CreatedAt: at(0)}, wantErr: store.ErrNotFound},
	}
	for name, tt := range tests {
		t.Run("Create "+name, func(t *testing.T) {
			got, created, err := s.CreateConversation(ctx, tt.c)
			if tt.wantErr != nil {
				wantErr(t, "CreateConversation", err, tt.wantErr)
				if created {
					t.Error("CreateConversation failed but created = true")
				}
				return
			}
			must(t, err)
			if created {
				t.Error("CreateConversation of an existing conversation: created = true")
			}
			if diff := cmp.Diff(want, got, opts); diff != "" {
				t.Errorf("CreateConversation (-want +got):\n%s", diff)
			}
		})
	}

	// Nothing refused was stored, and the original is unchanged.
	got, err = s.GetConversation(ctx, "c1")
	must(t, err)
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("GetConversation (-want +got):\n%s", diff)
	}
	checkUTC(t, "GetConversation", got.CreatedAt)
	for _, id := range []string{"c2", "c3", "c4"} {
		_, err := s.GetConversation(ctx, id)
		wantErr(t, "GetConversation of a refused conversation", err, store.ErrNotFound)
	}
}

func testConversationList(t *testing.T, s store.Store) {
	ctx := t.Context()
	seed(t, s, "acme", "prod", "u1")
	seed(t, s, "acme", "staging", "u2")

	conv := func(id, user, env string, d time.Duration) store.Conversation {
		return store.Conversation{ID: id, Tenant: "acme", Env: env, UserID: user, Title: "T " + id, CreatedAt: at(d)}
	}
	for _, c := range []store.Conversation{
		conv("c-old", "u1", "prod", 0),
		conv("c-new", "u1", "staging", 2*time.Hour),
		conv("c-mid-a", "u1", "prod", time.Hour),
		conv("c-mid-b", "u1", "prod", time.Hour), // same time as c-mid-a: ID descending
		conv("c-other", "u2", "prod", 3*time.Hour),
	} {
		_, _, err := s.CreateConversation(ctx, c)
		must(t, err)
	}

	stored := func(c store.Conversation) store.Conversation {
		c.CreatedAt = ms(c.CreatedAt)
		c.LastActivityAt = c.CreatedAt
		return c
	}
	tests := map[string]listCase[store.Conversation]{
		"newest first": {"u1", []store.Conversation{
			stored(conv("c-new", "u1", "staging", 2*time.Hour)),
			stored(conv("c-mid-b", "u1", "prod", time.Hour)),
			stored(conv("c-mid-a", "u1", "prod", time.Hour)),
			stored(conv("c-old", "u1", "prod", 0)),
		}},
		"only the user's": {"u2", []store.Conversation{stored(conv("c-other", "u2", "prod", 3*time.Hour))}},
		"unknown user":    {"nobody", nil},
	}
	checkLists(t, "ListConversations", tests,
		func(user string) ([]store.Conversation, error) { return s.ListConversations(ctx, user) },
		func(c store.Conversation) []time.Time { return []time.Time{c.CreatedAt} })
}

// listCase is a case of a list that one key, such as a user or a
// conversation, selects: what the list holds for it.
type listCase[T any] struct {
	key  string
	want []T
}

// checkLists runs list, named name, for the key of each case, and checks
// what it returns, whose times (as times tells them) must be in UTC.
func checkLists[T any](t *testing.T, name string, tests map[string]listCase[T], list func(key string) ([]T, error), times func(T) []time.Time) {
	for tn, tt := range tests {
		t.Run(tn, func(t *testing.T) {
			got, err := list(tt.key)
			must(t, err)
			if diff := cmp.Diff(tt.want, got, opts); diff != "" {
				t.Errorf("%s(%s) (-want +got):\n%s", name, tt.key, diff)
			}
			for _, v := range got {
				checkUTC(t, name, times(v)...)
			}
		})
	}
}

func testConversationUpdate(t *testing.T, s store.Store) {
	ctx := t.Context()
	seed(t, s, "acme", "prod", "u1")
	_, _, err := s.CreateConversation(ctx, store.Conversation{ID: "c1", Tenant: "acme", Env: "prod", UserID: "u1", Title: "First", CreatedAt: at(0)})
	must(t, err)
	_, _, err = s.CreateConversation(ctx, store.Conversation{ID: "c2", Tenant: "acme", Env: "prod", UserID: "u1", Title: "Other", CreatedAt: at(time.Minute)})
	must(t, err)
	want := store.Conversation{ID: "c1", Tenant: "acme", Env: "prod", UserID: "u1", Title: "First", CreatedAt: ms(at(0)), LastActivityAt: ms(at(0))}
	yes, no := true, false
	title := func(s string) *string { return &s }

	steps := []struct {
		name string
		ch   store.ConversationChange
		edit func(*store.Conversation)
	}{
		{"nothing", store.ConversationChange{}, func(*store.Conversation) {}},
		{"rename", store.ConversationChange{Title: title("Renamed")}, func(c *store.Conversation) { c.Title = "Renamed" }},
		{"archive", store.ConversationChange{Archived: &yes, At: at(time.Hour)}, func(c *store.Conversation) { c.ArchivedAt = ms(at(time.Hour)) }},
		{"archive again keeps the first time", store.ConversationChange{Archived: &yes, At: at(2 * time.Hour)}, func(*store.Conversation) {}},
		{"rename while archived", store.ConversationChange{Title: title("")}, func(c *store.Conversation) { c.Title = "" }},
		{"unarchive and rename at once", store.ConversationChange{Archived: &no, Title: title("Back")}, func(c *store.Conversation) {
			c.ArchivedAt = time.Time{}
			c.Title = "Back"
		}},
		{"unarchive what is not archived", store.ConversationChange{Archived: &no}, func(*store.Conversation) {}},
		{"a generated title for a named conversation", store.ConversationChange{Title: title("Generated"), Untitled: true}, func(*store.Conversation) {}},
		{"rename to nothing", store.ConversationChange{Title: title("")}, func(c *store.Conversation) { c.Title = "" }},
		{"a generated title for an unnamed conversation", store.ConversationChange{Title: title("Generated"), Untitled: true}, func(c *store.Conversation) { c.Title = "Generated" }},
	}
	for _, st := range steps {
		st.edit(&want)
		got, err := s.UpdateConversation(ctx, "c1", st.ch)
		must(t, err)
		if diff := cmp.Diff(want, got, opts); diff != "" {
			t.Errorf("UpdateConversation %s (-want +got):\n%s", st.name, diff)
		}
		stored, err := s.GetConversation(ctx, "c1")
		must(t, err)
		if diff := cmp.Diff(want, stored, opts); diff != "" {
			t.Errorf("GetConversation after %s (-want +got):\n%s", st.name, diff)
		}
		if !got.ArchivedAt.IsZero() {
			checkUTC(t, "UpdateConversation", got.ArchivedAt)
		}
	}

	// Archived conversations are still listed by the store; the other
	// conversation was never touched.
	_, err = s.UpdateConversation(ctx, "c1", store.ConversationChange{Archived: &yes, At: at(3 * time.Hour)})
	must(t, err)
	list, err := s.ListConversations(ctx, "u1")
	must(t, err)
	if len(list) != 2 || list[0].ID != "c2" || !list[0].ArchivedAt.IsZero() || list[0].Title != "Other" || list[1].ArchivedAt.IsZero() {
		t.Errorf("ListConversations after archiving c1: %+v", list)
	}

	_, err = s.UpdateConversation(ctx, "nope", store.ConversationChange{Title: title("x")})
	wantErr(t, "UpdateConversation of an unknown conversation", err, store.ErrNotFound)
}

func usage(id, conv string, d time.Duration) store.UsageRecord {
	return store.UsageRecord{
		ID:                       id,
		Tenant:                   "acme",
		Env:                      "prod",
		ConversationID:           conv,
		UserID:                   "u1",
		Model:                    "claude-sonnet-4-5",
		Status:                   200,
		Streamed:                 true,
		InputTokens:              1200,
		OutputTokens:             345,
		CacheCreationInputTokens: 1 << 40,
		CacheReadInputTokens:     7,
		StartedAt:                at(d),
		Duration:                 1500*time.Millisecond + 123456*time.Nanosecond,
	}
}

func testUsage(t *testing.T, s store.Store) {
	ctx := t.Context()

	// Usage needs no stored env, user or conversation.
	failed := usage("r-failed", "c1", time.Minute)
	failed.Status, failed.Streamed, failed.InputTokens, failed.OutputTokens = 0, false, 0, 0
	failed.CacheCreationInputTokens, failed.CacheReadInputTokens = 0, 0
	records := []store.UsageRecord{
		usage("r-2", "c1", 2*time.Minute),
		failed,
		usage("r-1b", "c1", 0),
		usage("r-1a", "c1", 0), // same time as r-1b: ID order
		usage("r-other", "c2", 0),
	}
	for _, u := range records {
		must(t, s.RecordUsage(ctx, u))
	}
	// A second record with a known ID changes nothing.
	again := usage("r-2", "c1", time.Hour)
	again.OutputTokens = 1
	must(t, s.RecordUsage(ctx, again))

	stored := func(u store.UsageRecord) store.UsageRecord {
		u.StartedAt = ms(u.StartedAt)
		u.Duration = u.Duration.Truncate(time.Microsecond)
		return u
	}
	tests := map[string]listCase[store.UsageRecord]{
		"oldest first": {"c1", []store.UsageRecord{
			stored(usage("r-1a", "c1", 0)),
			stored(usage("r-1b", "c1", 0)),
			stored(failed),
			stored(usage("r-2", "c1", 2*time.Minute)),
		}},
		"only the conversation's": {"c2", []store.UsageRecord{stored(usage("r-other", "c2", 0))}},
		"unknown conversation":    {"nope", nil},
	}
	checkLists(t, "ListUsage", tests,
		func(conv string) ([]store.UsageRecord, error) { return s.ListUsage(ctx, conv) },
		func(u store.UsageRecord) []time.Time { return []time.Time{u.StartedAt} })
}

// storedUsage is u as a store returns it.
func storedUsage(u store.UsageRecord) store.UsageRecord {
	u.StartedAt = ms(u.StartedAt)
	u.Duration = u.Duration.Truncate(time.Microsecond)
	return u
}

func testUsageBatch(t *testing.T, s store.Store) {
	ctx := t.Context()

	// An empty batch does nothing.
	must(t, s.RecordUsages(ctx, nil))
	must(t, s.RecordUsages(ctx, []store.UsageRecord{}))

	// A batch that fails stores nothing.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.RecordUsages(cancelled, []store.UsageRecord{usage("r-never", "c1", 0)}); err == nil {
		t.Error("RecordUsages with a cancelled context succeeded")
	}

	// Within one batch the first record of an ID counts; usage needs no
	// stored env, user or conversation.
	dupInBatch := usage("r-1", "c1", time.Hour)
	dupInBatch.OutputTokens = 1
	must(t, s.RecordUsages(ctx, []store.UsageRecord{
		usage("r-2", "c1", time.Minute),
		usage("r-1", "c1", 0),
		dupInBatch,
		usage("r-other", "c2", 0),
	}))
	// Across batches, and between RecordUsage and RecordUsages, a known ID
	// changes nothing.
	dupAcross := usage("r-2", "c1", time.Hour)
	dupAcross.InputTokens = 1
	must(t, s.RecordUsages(ctx, []store.UsageRecord{dupAcross, usage("r-3", "c1", 2*time.Minute)}))
	single := usage("r-3", "c1", time.Hour)
	single.Status = 500
	must(t, s.RecordUsage(ctx, single))
	must(t, s.RecordUsage(ctx, usage("r-4", "c1", 3*time.Minute)))
	again := usage("r-4", "c1", time.Hour)
	again.Model = "other"
	must(t, s.RecordUsages(ctx, []store.UsageRecord{again}))

	want := []store.UsageRecord{
		storedUsage(usage("r-1", "c1", 0)),
		storedUsage(usage("r-2", "c1", time.Minute)),
		storedUsage(usage("r-3", "c1", 2*time.Minute)),
		storedUsage(usage("r-4", "c1", 3*time.Minute)),
	}
	got, err := s.ListUsage(ctx, "c1")
	must(t, err)
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("ListUsage(c1) (-want +got):\n%s", diff)
	}
	got, err = s.ListUsage(ctx, "c2")
	must(t, err)
	if diff := cmp.Diff([]store.UsageRecord{storedUsage(usage("r-other", "c2", 0))}, got, opts); diff != "" {
		t.Errorf("ListUsage(c2) (-want +got):\n%s", diff)
	}
}

// testUsageBatchOrders sends large batches of the same usage records at
// once, half of them in the opposite order: overlapping batches must not
// deadlock, and each record is stored once.
func testUsageBatchOrders(t *testing.T, s store.Store) {
	ctx := t.Context()
	var batch []store.UsageRecord
	for i := range 300 {
		batch = append(batch, usage(fmt.Sprintf("r%03d", i), "c1", time.Duration(i)*time.Millisecond))
	}
	inOpposingOrders(batch, func(us []store.UsageRecord) {
		if err := s.RecordUsages(ctx, us); err != nil {
			t.Errorf("RecordUsages: %v", err)
		}
	})
	got, err := s.ListUsage(ctx, "c1")
	must(t, err)
	var want []store.UsageRecord
	for _, u := range batch {
		want = append(want, storedUsage(u))
	}
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("ListUsage (-want +got):\n%s", diff)
	}
}

// opposingWorkers is how many goroutines inOpposingOrders sends from.
const opposingWorkers = 8

// inOpposingOrders calls send with batch from opposingWorkers goroutines at
// once, every other one with batch reversed, and waits for them.
func inOpposingOrders[T any](batch []T, send func([]T)) {
	reversed := slices.Clone(batch)
	slices.Reverse(reversed)
	var wg sync.WaitGroup
	for w := range opposingWorkers {
		wg.Go(func() {
			if w%2 == 1 {
				send(reversed)
			} else {
				send(batch)
			}
		})
	}
	wg.Wait()
}

func report(key, conv string, d time.Duration) contract.Report {
	return contract.Report{IdempotencyKey: key, Kind: contract.ReportActivity, ConversationID: conv, TurnID: "t1", Time: at(d), Activity: "did " + key}
}

// keys lists the idempotency keys of rs, tagged with their tenant-env.
func keys(rs []store.StoredReport) []string {
	var ks []string
	for _, r := range rs {
		ks = append(ks, r.Tenant+"/"+r.Env+"/"+r.Report.IdempotencyKey)
	}
	return ks
}

func testReports(t *testing.T, s store.Store) {
	ctx := t.Context()
	steps := []struct {
		name       string
		batch      []contract.Report
		added      []int // indexes in batch
		duplicates int
	}{
		{"first", []contract.Report{report("a", "c1", 0), report("b", "c1", time.Second)}, []int{0, 1}, 0},
		{"retried", []contract.Report{report("a", "c1", 0), report("b", "c1", time.Second)}, nil, 2},
		{"overlapping", []contract.Report{report("b", "c1", time.Second), report("c", "c1", 2*time.Second)}, []int{1}, 1},
		{"repeats within", []contract.Report{report("c", "c1", 2*time.Second), report("d", "c1", 3*time.Second), report("d", "c1", 3*time.Second)}, []int{1}, 2},
		{"empty", nil, nil, 0},
	}
	for _, st := range steps {
		added, duplicates, err := s.AddReports(ctx, "acme", "prod", st.batch, at(time.Hour))
		must(t, err)
		if !slices.Equal(added, st.added) || duplicates != st.duplicates {
			t.Errorf("AddReports %s: added %v, duplicates %d; want %v, %d", st.name, added, duplicates, st.added, st.duplicates)
		}
	}

	// A duplicate with another body changes nothing.
	changed := report("a", "c1", 0)
	changed.Activity = "changed"
	_, _, err := s.AddReports(ctx, "acme", "prod", []contract.Report{changed}, at(2*time.Hour))
	must(t, err)

	// A batch with a keyless report fails whole.
	_, _, err = s.AddReports(ctx, "acme", "prod", []contract.Report{report("e", "c1", 0), report("", "c1", 0)}, at(time.Hour))
	if err == nil {
		t.Error("AddReports with a report without idempotency key: no error")
	}

	got, err := s.ListReports(ctx, "c1")
	must(t, err)
	var want []store.StoredReport
	for i, k := range []string{"a", "b", "c", "d"} {
		r := report(k, "c1", time.Duration(i)*time.Second)
		r.Time = ms(r.Time)
		want = append(want, store.StoredReport{Tenant: "acme", Env: "prod", Report: r, ReceivedAt: ms(at(time.Hour))})
	}
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("ListReports (-want +got):\n%s", diff)
	}

	got, err = s.ListReports(ctx, "nope")
	must(t, err)
	if len(got) != 0 {
		t.Errorf("ListReports of an unknown conversation = %v, want none", keys(got))
	}
}

func testReportsTenantEnvs(t *testing.T, s store.Store) {
	ctx := t.Context()
	// One key under three tenant-envs is three reports, each then a
	// duplicate only under its own.
	for _, te := range [][2]string{{"acme", "prod"}, {"acme", "staging"}, {"beta", "prod"}} {
		for _, want := range [][2]int{{1, 0}, {0, 1}} {
			added, duplicates, err := s.AddReports(ctx, te[0], te[1], []contract.Report{report("k", "c1", 0)}, at(time.Hour))
			must(t, err)
			if len(added) != want[0] || duplicates != want[1] {
				t.Errorf("AddReports %s/%s: added %v, duplicates %d; want %d, %d", te[0], te[1], added, duplicates, want[0], want[1])
			}
		}
	}
	got, err := s.ListReports(ctx, "c1")
	must(t, err)
	want := []string{"acme/prod/k", "acme/staging/k", "beta/prod/k"}
	if diff := cmp.Diff(want, keys(got)); diff != "" {
		t.Errorf("ListReports keys (-want +got):\n%s", diff)
	}
}

func testReportsRoundTrip(t *testing.T, s store.Store) {
	ctx := t.Context()
	rs := []contract.Report{
		{
			IdempotencyKey: "usage-1", Kind: contract.ReportUsage, ConversationID: "c1", TurnID: "turn-1", Time: at(2 * time.Second),
			Usage: &contract.Usage{Model: "claude-sonnet-4-5", InputTokens: 10, OutputTokens: 20, CacheCreationInputTokens: 30, CacheReadInputTokens: 40},
		},
		{
			IdempotencyKey: "tool-1", Kind: contract.ReportToolUse, ConversationID: "c1", TurnID: "turn-1", Time: at(time.Second),
			Tool: &contract.ToolReport{ID: "toolu_1", Name: "bash", IsError: true, DurationMS: 1234},
		},
		{
			IdempotencyKey: "activity-1", Kind: contract.ReportActivity, ConversationID: "c1", Time: at(3 * time.Second),
			Activity: "edited main.go",
		},
		{
			IdempotencyKey: "other-1", Kind: contract.ReportActivity, ConversationID: "c2", Time: at(0), Activity: "elsewhere",
		},
	}
	added, duplicates, err := s.AddReports(ctx, "acme", "prod", rs, at(time.Minute))
	must(t, err)
	if len(added) != len(rs) || duplicates != 0 {
		t.Errorf("AddReports: added %v, duplicates %d; want all %d, 0", added, duplicates, len(rs))
	}
	stored := func(r contract.Report) store.StoredReport {
		r.Time = ms(r.Time)
		return store.StoredReport{Tenant: "acme", Env: "prod", Report: r, ReceivedAt: ms(at(time.Minute))}
	}
	got, err := s.ListReports(ctx, "c1")
	must(t, err)
	want := []store.StoredReport{stored(rs[1]), stored(rs[0]), stored(rs[2])}
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("ListReports (-want +got):\n%s", diff)
	}
	for _, r := range got {
		checkUTC(t, "ListReports", r.Report.Time, r.ReceivedAt)
	}
}

func testNotFound(t *testing.T, s store.Store) {
	ctx := t.Context()
	seed(t, s, "acme", "prod", "u1")
	_, _, err := s.CreateConversation(ctx, store.Conversation{ID: "c1", Tenant: "acme", Env: "prod", UserID: "u1", CreatedAt: at(0)})
	must(t, err)
	must(t, s.AddIdentityToken(ctx, store.IdentityToken{ID: "tok1", Tenant: "acme", Env: "prod", CreatedAt: at(0), ExpiresAt: at(time.Hour)}))

	tests := map[string]func() error{
		"GetEnv unknown env":    func() error { _, err := s.GetEnv(ctx, "acme", "nope"); return err },
		"GetEnv unknown tenant": func() error { _, err := s.GetEnv(ctx, "nope", "prod"); return err },
		"GetIdentityToken":      func() error { _, err := s.GetIdentityToken(ctx, "nope"); return err },
		"RevokeIdentityToken":   func() error { return s.RevokeIdentityToken(ctx, "nope", at(0)) },
		"GetUser":               func() error { _, err := s.GetUser(ctx, "nope"); return err },
		"GetConversation":       func() error { _, err := s.GetConversation(ctx, "nope"); return err },
	}
	for name, f := range tests {
		t.Run(name, func(t *testing.T) {
			wantErr(t, name, f(), store.ErrNotFound)
		})
	}
}

// testConcurrent sends the same facts from many goroutines at once: each is
// counted exactly once.
func testConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	seed(t, s, "acme", "prod", "u1")
	const (
		workers = 16
		nkeys   = 10
	)
	var batch []contract.Report
	for i := range nkeys {
		batch = append(batch, report(fmt.Sprintf("k%02d", i), "c1", time.Duration(i)*time.Second))
	}

	var (
		wg                   sync.WaitGroup
		mu                   sync.Mutex // guards accepted, duplicates, created
		accepted, duplicates int
		created              int
	)
	for w := range workers {
		wg.Go(func() {
			// Each worker sends the keys in its own order.
			rs := make([]contract.Report, nkeys)
			for i := range nkeys {
				rs[i] = batch[(i+w)%nkeys]
			}
			a, d, err := s.AddReports(ctx, "acme", "prod", rs, at(time.Hour))
			if err != nil {
				t.Errorf("AddReports: %v", err)
				return
			}
			for i := range nkeys {
				if err := s.RecordUsage(ctx, usage(fmt.Sprintf("r%02d", (i+w)%nkeys), "c1", 0)); err != nil {
					t.Errorf("RecordUsage: %v", err)
				}
			}
			_, c, err := s.CreateConversation(ctx, store.Conversation{ID: "c1", Tenant: "acme", Env: "prod", UserID: "u1", CreatedAt: at(0)})
			if err != nil {
				t.Errorf("CreateConversation: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			accepted += len(a)
			duplicates += d
			if c {
				created++
			}
		})
	}
	wg.Wait()

	if accepted != nkeys || duplicates != (workers-1)*nkeys {
		t.Errorf("AddReports from %d workers: accepted %d, duplicates %d; want %d, %d", workers, accepted, duplicates, nkeys, (workers-1)*nkeys)
	}
	if created != 1 {
		t.Errorf("CreateConversation from %d workers: created %d times, want 1", workers, created)
	}
	rs, err := s.ListReports(ctx, "c1")
	must(t, err)
	if len(rs) != nkeys {
		t.Errorf("ListReports: %d reports, want %d: %v", len(rs), nkeys, keys(rs))
	}
	us, err := s.ListUsage(ctx, "c1")
	must(t, err)
	if len(us) != nkeys {
		t.Errorf("ListUsage: %d records, want %d", len(us), nkeys)
	}
}

// testConcurrentOrders sends large batches of the same reports at once, half
// of them in the opposite order: however a store inserts them, batches that
// overlap must not deadlock.
func testConcurrentOrders(t *testing.T, s store.Store) {
	ctx := t.Context()
	const nkeys = 300
	var batch []contract.Report
	for i := range nkeys {
		batch = append(batch, report(fmt.Sprintf("k%03d", i), "c1", time.Duration(i)*time.Millisecond))
	}
	var (
		mu       sync.Mutex // guards accepted
		accepted int
	)
	inOpposingOrders(batch, func(rs []contract.Report) {
		a, d, err := s.AddReports(ctx, "acme", "prod", rs, at(time.Hour))
		if err != nil {
			t.Errorf("AddReports: %v", err)
			return
		}
		if len(a)+d != nkeys {
			t.Errorf("AddReports: accepted %d + duplicates %d, want %d in all", len(a), d, nkeys)
		}
		mu.Lock()
		defer mu.Unlock()
		accepted += len(a)
	})
	if accepted != nkeys {
		t.Errorf("AddReports from %d workers: accepted %d, want %d", opposingWorkers, accepted, nkeys)
	}
}

// testByteOrder checks that strings order by their bytes, as Go compares
// them (and SQLite does), not by a database's linguistic collation, which
// would put "Zed" after "alpha" and ignore the "-" in "a-b". Text, including
// non-ASCII, round-trips unchanged.
func testByteOrder(t *testing.T, s store.Store) {
	ctx := t.Context()
	names := []string{"alpha", "Zed", "a-b", "ab", "a_b", "a b", "Ab", "é", "e", "f", "日本", "😀"}
	sorted := slices.Clone(names)
	sort.Strings(sorted)

	// Envs, by tenant then name.
	var wantEnvs []store.Env
	for _, tenant := range []string{"t", "T"} {
		for _, n := range names {
			must(t, s.PutEnv(ctx, store.Env{Tenant: tenant, Name: n, WorkerURL: "http://" + n, CreatedAt: t0}))
		}
	}
	for _, tenant := range []string{"T", "t"} {
		for _, n := range sorted {
			wantEnvs = append(wantEnvs, store.Env{Tenant: tenant, Name: n, WorkerURL: "http://" + n, CreatedAt: ms(t0)})
		}
	}
	envs, err := s.ListEnvs(ctx)
	must(t, err)
	if diff := cmp.Diff(wantEnvs, envs, opts); diff != "" {
		t.Errorf("ListEnvs (-want +got):\n%s", diff)
	}

	// Conversations at one time, by ID descending.
	must(t, s.PutUser(ctx, store.User{ID: "u1", Name: "Ünïcødé 😀", CreatedAt: t0}))
	for _, n := range names {
		_, _, err := s.CreateConversation(ctx, store.Conversation{ID: n, Tenant: "t", Env: "e", UserID: "u1", Title: "T " + n, CreatedAt: t0})
		must(t, err)
	}
	var wantConvs []store.Conversation
	for _, n := range slices.Backward(sorted) {
		wantConvs = append(wantConvs, store.Conversation{ID: n, Tenant: "t", Env: "e", UserID: "u1", Title: "T " + n, CreatedAt: ms(t0), LastActivityAt: ms(t0)})
	}
	convs, err := s.ListConversations(ctx, "u1")
	must(t, err)
	if diff := cmp.Diff(wantConvs, convs, opts); diff != "" {
		t.Errorf("ListConversations (-want +got):\n%s", diff)
	}
	u, err := s.GetUser(ctx, "u1")
	must(t, err)
	if u.Name != "Ünïcødé 😀" {
		t.Errorf("GetUser: name %q, want %q", u.Name, "Ünïcødé 😀")
	}

	// Usage at one time, by ID.
	for _, n := range names {
		must(t, s.RecordUsage(ctx, usage(n, "c1", 0)))
	}
	us, err := s.ListUsage(ctx, "c1")
	must(t, err)
	var gotIDs []string
	for _, u := range us {
		gotIDs = append(gotIDs, u.ID)
	}
	if diff := cmp.Diff(sorted, gotIDs); diff != "" {
		t.Errorf("ListUsage IDs (-want +got):\n%s", diff)
	}

	// Reports at one time, by tenant, env, then key.
	for _, te := range [][2]string{{"t", "e"}, {"T", "e"}, {"t", "E"}} {
		var rs []contract.Report
		for _, n := range names {
			rs = append(rs, report(n, "c1", 0))
		}
		_, _, err := s.AddReports(ctx, te[0], te[1], rs, at(time.Hour))
		must(t, err)
	}
	var wantKeys []string
	for _, te := range []string{"T/e", "t/E", "t/e"} {
		for _, n := range sorted {
			wantKeys = append(wantKeys, te+"/"+n)
		}
	}
	got, err := s.ListReports(ctx, "c1")
	must(t, err)
	if diff := cmp.Diff(wantKeys, keys(got)); diff != "" {
		t.Errorf("ListReports keys (-want +got):\n%s", diff)
	}
}
