package storetest

import (
	"crypto/sha256"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/store"
)

// The accounts' tests: memberships, OpenID Connect identities, browser
// sessions and API tokens.
var accountTests = map[string]func(*testing.T, store.Store){
	"Memberships":            testMemberships,
	"MembershipsConcurrent":  testMembershipsConcurrent,
	"TenantConversations":    testTenantConversations,
	"OIDCIdentities":         testOIDCIdentities,
	"BrowserSessions":        testBrowserSessions,
	"APITokens":              testAPITokens,
	"AccountsUnknownParents": testAccountsUnknownParents,
}

func testMemberships(t *testing.T, s store.Store) {
	ctx := t.Context()
	seed(t, s, "acme", "prod", "u1")
	seed(t, s, "acme", "staging", "u2")
	seed(t, s, "beta", "prod", "u3")

	put := func(m store.Membership) store.Membership {
		t.Helper()
		got, err := s.PutMembership(ctx, m)
		must(t, err)
		checkUTC(t, "PutMembership", got.CreatedAt)
		return got
	}
	m1 := put(store.Membership{UserID: "u1", Tenant: "acme", Role: store.RoleMember, CreatedAt: at(0)})
	if want := (store.Membership{UserID: "u1", Tenant: "acme", Role: store.RoleMember, CreatedAt: ms(at(0))}); !cmp.Equal(want, m1) {
		t.Errorf("PutMembership = %+v, want %+v", m1, want)
	}
	// A second put changes the role and keeps CreatedAt.
	m1 = put(store.Membership{UserID: "u1", Tenant: "acme", Role: store.RoleTenantAdmin, CreatedAt: at(time.Hour)})
	if m1.Role != store.RoleTenantAdmin || !m1.CreatedAt.Equal(ms(at(0))) {
		t.Errorf("PutMembership again = %+v, want tenant-admin created at %v", m1, ms(at(0)))
	}
	// The source round-trips, and a later put sets it too.
	m2 := put(store.Membership{UserID: "u2", Tenant: "acme", Env: "staging", Role: store.RoleMember, FromClaim: true, CreatedAt: at(time.Minute)})
	if !m2.FromClaim {
		t.Errorf("PutMembership from a claim = %+v, want FromClaim", m2)
	}
	if got := put(store.Membership{UserID: "u2", Tenant: "acme", Env: "staging", Role: store.RoleMember, CreatedAt: at(time.Hour)}); got.FromClaim {
		t.Errorf("PutMembership by an operator over a claim's = %+v, want not FromClaim", got)
	}
	put(store.Membership{UserID: "u2", Tenant: "acme", Env: "staging", Role: store.RoleMember, FromClaim: true, CreatedAt: at(time.Minute)})
	put(store.Membership{UserID: "u1", Tenant: "beta", Env: "prod", Role: store.RoleMember, CreatedAt: at(time.Minute)})
	put(store.Membership{UserID: "u3", Tenant: "beta", Role: store.RoleMember, CreatedAt: at(time.Minute)})

	key := func(ms []store.Membership) []string {
		var out []string
		for _, m := range ms {
			k := m.UserID + "@" + m.Tenant + "/" + m.Env + ":" + string(m.Role)
			if m.FromClaim {
				k += "(claim)"
			}
			out = append(out, k)
		}
		return out
	}
	tests := map[string]struct {
		user, tenant string
		want         []string
	}{
		"of u1":         {user: "u1", want: []string{"u1@acme/:tenant-admin", "u1@beta/prod:member"}},
		"of acme":       {tenant: "acme", want: []string{"u1@acme/:tenant-admin", "u2@acme/staging:member(claim)"}},
		"of beta":       {tenant: "beta", want: []string{"u3@beta/:member", "u1@beta/prod:member"}},
		"of u1 in beta": {user: "u1", tenant: "beta", want: []string{"u1@beta/prod:member"}},
		"of u2 in beta": {user: "u2", tenant: "beta"},
		"of nobody":     {user: "nobody"},
	}
	for name, tt := range tests {
		got, err := s.ListMemberships(ctx, tt.user, tt.tenant)
		must(t, err)
		if diff := cmp.Diff(tt.want, key(got), opts); diff != "" {
			t.Errorf("ListMemberships %s (-want +got):\n%s", name, diff)
		}
	}
	if _, err := s.ListMemberships(ctx, "", ""); err == nil {
		t.Error("ListMemberships of nobody in no tenant: no error")
	}

	bad := map[string]struct {
		m    store.Membership
		want error // nil: any error
	}{
		"unknown user":          {m: store.Membership{UserID: "nobody", Tenant: "acme", Role: store.RoleMember, CreatedAt: t0}, want: store.ErrNotFound},
		"unknown tenant":        {m: store.Membership{UserID: "u1", Tenant: "nope", Role: store.RoleMember, CreatedAt: t0}, want: store.ErrNotFound},
		"unknown env":           {m: store.Membership{UserID: "u1", Tenant: "acme", Env: "nope", Role: store.RoleMember, CreatedAt: t0}, want: store.ErrNotFound},
		"env of another tenant": {m: store.Membership{UserID: "u1", Tenant: "beta", Env: "staging", Role: store.RoleMember, CreatedAt: t0}, want: store.ErrNotFound},
		"no role":               {m: store.Membership{UserID: "u1", Tenant: "acme", CreatedAt: t0}},
		"unknown role":          {m: store.Membership{UserID: "u1", Tenant: "acme", Role: "operator", CreatedAt: t0}},
	}
	for name, tt := range bad {
		_, err := s.PutMembership(ctx, tt.m)
		if err == nil {
			t.Errorf("PutMembership %s: no error", name)
		} else if tt.want != nil {
			wantErr(t, "PutMembership "+name, err, tt.want)
		}
	}
	// Nothing refused was stored, and u1's role in acme is unchanged.
	got, err := s.ListMemberships(ctx, "u1", "acme")
	must(t, err)
	if diff := cmp.Diff([]string{"u1@acme/:tenant-admin"}, key(got)); diff != "" {
		t.Errorf("after refusals (-want +got):\n%s", diff)
	}

	must(t, s.DeleteMembership(ctx, "u1", "beta", "prod"))
	wantErr(t, "DeleteMembership again", s.DeleteMembership(ctx, "u1", "beta", "prod"), store.ErrNotFound)
	// The tenant-wide membership is another than the env's.
	wantErr(t, "DeleteMembership of the tenant for an env's", s.DeleteMembership(ctx, "u2", "acme", ""), store.ErrNotFound)
	got, err = s.ListMemberships(ctx, "u1", "")
	must(t, err)
	if diff := cmp.Diff([]string{"u1@acme/:tenant-admin"}, key(got)); diff != "" {
		t.Errorf("after delete (-want +got):\n%s", diff)
	}
}

// testMembershipsConcurrent: puts of one membership from many goroutines
// leave one row.
func testMembershipsConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	seed(t, s, "acme", "prod", "u1")
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			role := store.RoleMember
			if i%2 == 1 {
				role = store.RoleTenantAdmin
			}
			_, err := s.PutMembership(ctx, store.Membership{UserID: "u1", Tenant: "acme", Env: "prod", Role: role, CreatedAt: at(time.Duration(i) * time.Second)})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	got, err := s.ListMemberships(ctx, "u1", "acme")
	must(t, err)
	if len(got) != 1 {
		t.Fatalf("ListMemberships after concurrent puts: %d rows, want 1: %+v", len(got), got)
	}
}

func testTenantConversations(t *testing.T, s store.Store) {
	ctx := t.Context()
	seed(t, s, "acme", "prod", "u1")
	seed(t, s, "acme", "staging", "u2")
	seed(t, s, "beta", "prod", "u3")
	for i, c := range []store.Conversation{
		{ID: "c1", Tenant: "acme", Env: "prod", UserID: "u1"},
		{ID: "c2", Tenant: "acme", Env: "staging", UserID: "u2"},
		{ID: "c3", Tenant: "beta", Env: "prod", UserID: "u3"},
		{ID: "c4", Tenant: "acme", Env: "prod", UserID: "u2"},
	} {
		c.CreatedAt = at(time.Duration(i) * time.Minute)
		_, _, err := s.CreateConversation(ctx, c)
		must(t, err)
	}
	ids := func(cs []store.Conversation) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.ID)
		}
		return out
	}
	for name, tt := range map[string]struct {
		tenant, env string
		want        []string
	}{
		"acme":       {tenant: "acme", want: []string{"c4", "c2", "c1"}},
		"acme/prod":  {tenant: "acme", env: "prod", want: []string{"c4", "c1"}},
		"beta":       {tenant: "beta", want: []string{"c3"}},
		"beta/stage": {tenant: "beta", env: "staging"},
		"nope":       {tenant: "nope"},
	} {
		got, err := s.ListTenantConversations(ctx, tt.tenant, tt.env)
		must(t, err)
		if diff := cmp.Diff(tt.want, ids(got), opts); diff != "" {
			t.Errorf("ListTenantConversations %s (-want +got):\n%s", name, diff)
		}
	}
}

func testOIDCIdentities(t *testing.T, s store.Store) {
	ctx := t.Context()
	seed(t, s, "acme", "prod", "u1")
	seed(t, s, "acme", "prod", "u2")
	id := store.OIDCIdentity{Issuer: "https://id.example", Subject: "sub-1", UserID: "u1", CreatedAt: at(0)}
	got, created, err := s.PutOIDCIdentity(ctx, id)
	must(t, err)
	want := id
	want.CreatedAt = ms(at(0))
	if !created || !cmp.Equal(want, got) {
		t.Errorf("PutOIDCIdentity = %+v, %v; want %+v, true", got, created, want)
	}
	// Another user for the same subject: the first link stands.
	got, created, err = s.PutOIDCIdentity(ctx, store.OIDCIdentity{Issuer: id.Issuer, Subject: id.Subject, UserID: "u2", CreatedAt: at(time.Hour)})
	must(t, err)
	if created || !cmp.Equal(want, got) {
		t.Errorf("PutOIDCIdentity again = %+v, %v; want %+v, false", got, created, want)
	}
	// The same subject at another issuer is another identity.
	_, created, err = s.PutOIDCIdentity(ctx, store.OIDCIdentity{Issuer: "https://other.example", Subject: id.Subject, UserID: "u2", CreatedAt: at(0)})
	must(t, err)
	if !created {
		t.Error("PutOIDCIdentity at another issuer: created = false")
	}
	got, err = s.GetOIDCIdentity(ctx, id.Issuer, id.Subject)
	must(t, err)
	if !cmp.Equal(want, got) {
		t.Errorf("GetOIDCIdentity = %+v, want %+v", got, want)
	}
	checkUTC(t, "GetOIDCIdentity", got.CreatedAt)
	_, err = s.GetOIDCIdentity(ctx, id.Issuer, "sub-2")
	wantErr(t, "GetOIDCIdentity of an unknown subject", err, store.ErrNotFound)
}

func testBrowserSessions(t *testing.T, s store.Store) {
	ctx := t.Context()
	seed(t, s, "acme", "prod", "u1")
	h1, h2 := sha256.Sum256([]byte("one")), sha256.Sum256([]byte("two"))
	bs := store.BrowserSession{Hash: h1, UserID: "u1", CreatedAt: at(0), LastSeenAt: at(0), ExpiresAt: at(12 * time.Hour)}
	must(t, s.CreateBrowserSession(ctx, bs))
	wantErr(t, "CreateBrowserSession of a taken hash", s.CreateBrowserSession(ctx, bs), store.ErrConflict)
	must(t, s.CreateBrowserSession(ctx, store.BrowserSession{Hash: h2, UserID: "u1", CreatedAt: at(0), LastSeenAt: at(0), ExpiresAt: at(time.Hour)}))

	must(t, s.TouchBrowserSession(ctx, h1, at(time.Minute)))
	// An earlier touch (a slower concurrent request) does not move it back.
	must(t, s.TouchBrowserSession(ctx, h1, at(time.Second)))
	got, err := s.GetBrowserSession(ctx, h1)
	must(t, err)
	want := store.BrowserSession{Hash: h1, UserID: "u1", CreatedAt: ms(at(0)), LastSeenAt: ms(at(time.Minute)), ExpiresAt: ms(at(12 * time.Hour))}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GetBrowserSession (-want +got):\n%s", diff)
	}
	checkUTC(t, "GetBrowserSession", got.CreatedAt, got.LastSeenAt, got.ExpiresAt)
	unknown := sha256.Sum256([]byte("unknown"))
	_, err = s.GetBrowserSession(ctx, unknown)
	wantErr(t, "GetBrowserSession unknown", err, store.ErrNotFound)
	wantErr(t, "TouchBrowserSession unknown", s.TouchBrowserSession(ctx, unknown, at(0)), store.ErrNotFound)

	// The sweep: h2 ends at 1 h; h1 was last seen at 1 min.
	n, err := s.DeleteBrowserSessions(ctx, at(time.Hour), at(0))
	must(t, err)
	if n != 1 {
		t.Errorf("DeleteBrowserSessions by expiry removed %d, want 1", n)
	}
	_, err = s.GetBrowserSession(ctx, h2)
	wantErr(t, "GetBrowserSession after the sweep", err, store.ErrNotFound)
	n, err = s.DeleteBrowserSessions(ctx, at(0), at(2*time.Minute))
	must(t, err)
	if n != 1 {
		t.Errorf("DeleteBrowserSessions by idleness removed %d, want 1", n)
	}

	must(t, s.CreateBrowserSession(ctx, bs))
	must(t, s.DeleteBrowserSession(ctx, h1))
	_, err = s.GetBrowserSession(ctx, h1)
	wantErr(t, "GetBrowserSession after logout", err, store.ErrNotFound)
	must(t, s.DeleteBrowserSession(ctx, h1))
}

func testAPITokens(t *testing.T, s store.Store) {
	ctx := t.Context()
	seed(t, s, "acme", "prod", "u1")
	seed(t, s, "acme", "prod", "u2")
	tok := store.APIToken{ID: "k1", UserID: "u1", Name: "laptop", Hash: sha256.Sum256([]byte("s1")), CreatedAt: at(0), ExpiresAt: at(24 * time.Hour)}
	must(t, s.AddAPIToken(ctx, tok))
	wantErr(t, "AddAPIToken of a taken id", s.AddAPIToken(ctx, tok), store.ErrConflict)
	must(t, s.AddAPIToken(ctx, store.APIToken{ID: "k2", UserID: "u2", Hash: sha256.Sum256([]byte("s2")), CreatedAt: at(time.Minute)}))
	must(t, s.AddAPIToken(ctx, store.APIToken{ID: "k0", UserID: "u1", Name: "ci", Hash: sha256.Sum256([]byte("s0")), CreatedAt: at(2 * time.Minute)}))

	got, err := s.GetAPIToken(ctx, "k1")
	must(t, err)
	want := store.APIToken{ID: "k1", UserID: "u1", Name: "laptop", Hash: tok.Hash, CreatedAt: ms(at(0)), ExpiresAt: ms(at(24 * time.Hour))}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GetAPIToken (-want +got):\n%s", diff)
	}
	must(t, s.TouchAPIToken(ctx, "k1", at(time.Hour)))
	must(t, s.TouchAPIToken(ctx, "k1", at(time.Minute)))
	must(t, s.RevokeAPIToken(ctx, "k1", at(2*time.Hour)))
	must(t, s.RevokeAPIToken(ctx, "k1", at(3*time.Hour)))
	got, err = s.GetAPIToken(ctx, "k1")
	must(t, err)
	want.LastUsedAt, want.RevokedAt = ms(at(time.Hour)), ms(at(2*time.Hour))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GetAPIToken after use and revocation (-want +got):\n%s", diff)
	}
	checkUTC(t, "GetAPIToken", got.CreatedAt, got.ExpiresAt, got.LastUsedAt, got.RevokedAt)
	// A token without expiry keeps the zero time.
	if got, err := s.GetAPIToken(ctx, "k2"); err != nil || !got.ExpiresAt.IsZero() || !got.LastUsedAt.IsZero() {
		t.Errorf("GetAPIToken(k2) = %+v, %v; want no expiry, never used", got, err)
	}

	ids := func(ts []store.APIToken) []string {
		var out []string
		for _, t := range ts {
			out = append(out, t.ID)
		}
		return out
	}
	for user, want := range map[string][]string{"u1": {"k1", "k0"}, "u2": {"k2"}, "": {"k1", "k2", "k0"}, "nobody": nil} {
		got, err := s.ListAPITokens(ctx, user)
		must(t, err)
		if diff := cmp.Diff(want, ids(got), opts); diff != "" {
			t.Errorf("ListAPITokens(%q) (-want +got):\n%s", user, diff)
		}
	}
	_, err = s.GetAPIToken(ctx, "nope")
	wantErr(t, "GetAPIToken unknown", err, store.ErrNotFound)
	wantErr(t, "RevokeAPIToken unknown", s.RevokeAPIToken(ctx, "nope", at(0)), store.ErrNotFound)
	wantErr(t, "TouchAPIToken unknown", s.TouchAPIToken(ctx, "nope", at(0)), store.ErrNotFound)
}

func testAccountsUnknownParents(t *testing.T, s store.Store) {
	ctx := t.Context()
	seed(t, s, "acme", "prod", "u1")
	h := sha256.Sum256([]byte("x"))
	_, _, err := s.PutOIDCIdentity(ctx, store.OIDCIdentity{Issuer: "i", Subject: "s", UserID: "nobody", CreatedAt: t0})
	wantErr(t, "PutOIDCIdentity of an unknown user", err, store.ErrNotFound)
	wantErr(t, "CreateBrowserSession of an unknown user",
		s.CreateBrowserSession(ctx, store.BrowserSession{Hash: h, UserID: "nobody", CreatedAt: t0, LastSeenAt: t0, ExpiresAt: t0}), store.ErrNotFound)
	wantErr(t, "AddAPIToken of an unknown user",
		s.AddAPIToken(ctx, store.APIToken{ID: "k", UserID: "nobody", Hash: h, CreatedAt: t0}), store.ErrNotFound)
	toks, err := s.ListAPITokens(ctx, "")
	must(t, err)
	if !slices.Equal(nil, toks) {
		t.Errorf("ListAPITokens after refusals = %+v, want none", toks)
	}
}
