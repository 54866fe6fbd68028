package auth

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/fakeclock"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/sqlite"
	"github.com/talkide/platform/internal/store/storetest"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func newAuth(t *testing.T, opts Options) (*Authenticator, store.Store, *fakeclock.Clock) {
	t.Helper()
	st := storetest.Open(t, sqlite.Open, ":memory:")
	ctx := t.Context()
	if err := st.PutEnv(ctx, store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://w", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"alice", "bob"} {
		if err := st.PutUser(ctx, store.User{ID: u, Name: u, CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.PutMembership(ctx, store.Membership{UserID: u, Tenant: "acme", Role: store.RoleMember, CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	clk := fakeclock.New(t0)
	opts.Now = clk.Now
	a, err := New(st, &opts)
	if err != nil {
		t.Fatal(err)
	}
	return a, st, clk
}

func request(h http.Header, remote string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/api/conversations", nil)
	r.RemoteAddr = remote
	for k, v := range h {
		r.Header[k] = v
	}
	return r
}

func status(err error) int {
	var he *httpapi.Error
	if errors.As(err, &he) {
		return he.Status
	}
	if err != nil {
		return 500
	}
	return 200
}

func TestAPITokens(t *testing.T) {
	a, st, clk := newAuth(t, Options{})
	ctx := t.Context()
	tok, rec, err := IssueAPIToken(ctx, st, "alice", "laptop", time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, "tka_"+rec.ID+".") || rec.Name != "laptop" || !rec.ExpiresAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("issued %q %+v", tok, rec)
	}
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	c, err := a.Authenticate(request(bearer(tok), "192.0.2.1:5"))
	if err != nil || c.UserID != "alice" || c.Via != ViaToken || len(c.Memberships) != 1 {
		t.Fatalf("Authenticate = %+v, %v", c, err)
	}
	if got, _ := st.GetAPIToken(ctx, rec.ID); !got.LastUsedAt.Equal(t0) {
		t.Errorf("LastUsedAt = %v, want %v", got.LastUsedAt, t0)
	}
	// Bad inputs to issuing.
	for name, f := range map[string]func() error{
		"unknown user":      func() error { _, _, err := IssueAPIToken(ctx, st, "nobody", "", 0, t0); return err },
		"bad user id":       func() error { _, _, err := IssueAPIToken(ctx, st, "../x", "", 0, t0); return err },
		"negative lifetime": func() error { _, _, err := IssueAPIToken(ctx, st, "alice", "", -time.Hour, t0); return err },
		"name with newline": func() error { _, _, err := IssueAPIToken(ctx, st, "alice", "a\nb", 0, t0); return err },
	} {
		if f() == nil {
			t.Errorf("IssueAPIToken %s: no error", name)
		}
	}
	// Expiry and revocation.
	clk.Advance(time.Hour)
	if _, err := a.Authenticate(request(bearer(tok), "192.0.2.1:5")); status(err) != 401 {
		t.Errorf("expired token: %v", err)
	}
	tok2, rec2, err := IssueAPIToken(ctx, st, "alice", "", 0, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RevokeAPIToken(ctx, st, rec2.ID, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(request(bearer(tok2), "192.0.2.1:5")); status(err) != 401 {
		t.Errorf("revoked token: %v", err)
	}
	if _, err := RevokeAPIToken(ctx, st, tok2, clk.Now()); !errors.Is(err, store.ErrNotFound) || strings.Contains(err.Error(), tok2) {
		t.Errorf("revoking by the whole token: %v", err)
	}
	// Ids are random base64url: one may begin with '-' or '_', and still
	// revokes.
	for _, id := range []string{"-WJkO3hGzRdC", "_abc"} {
		must := store.APIToken{ID: id, UserID: "alice", Hash: rec.Hash, CreatedAt: t0}
		if err := st.AddAPIToken(ctx, must); err != nil {
			t.Fatal(err)
		}
		if _, err := RevokeAPIToken(ctx, st, id, clk.Now()); err != nil {
			t.Errorf("revoking %s: %v", id, err)
		}
	}
}

func TestTokenRateLimit(t *testing.T) {
	a, st, clk := newAuth(t, Options{TokenPerMinute: 60})
	tok, _, err := IssueAPIToken(t.Context(), st, "alice", "", 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := IssueAPIToken(t.Context(), st, "bob", "", 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"Authorization": {"Bearer " + tok}}
	n := 0
	for ; n < 100; n++ {
		if _, err := a.Authenticate(request(h, "192.0.2.1:5")); err != nil {
			if status(err) != http.StatusTooManyRequests {
				t.Fatalf("request %d: %v", n, err)
			}
			break
		}
	}
	if n != 12 { // the burst: a fifth of a minute's rate
		t.Errorf("%d requests passed before the limit, want 12", n)
	}
	// Another token is not held back; the first recovers with time.
	if _, err := a.Authenticate(request(http.Header{"Authorization": {"Bearer " + other}}, "192.0.2.1:5")); err != nil {
		t.Errorf("another token: %v", err)
	}
	clk.Advance(time.Second)
	if _, err := a.Authenticate(request(h, "192.0.2.1:5")); err != nil {
		t.Errorf("after a second: %v", err)
	}
}

func TestFailuresLimitedPerSource(t *testing.T) {
	a, _, _ := newAuth(t, Options{})
	h := http.Header{"Authorization": {"Bearer tka_abc.0123456789abcdef0123"}}
	var last error
	for range failuresPerMinute + 1 {
		_, last = a.Authenticate(request(h, "198.51.100.7:1"))
	}
	if status(last) != http.StatusTooManyRequests {
		t.Errorf("after %d failures: %v, want 429", failuresPerMinute+1, last)
	}
	// Another source is not.
	if _, err := a.Authenticate(request(h, "198.51.100.8:1")); status(err) != 401 {
		t.Errorf("another source: %v, want 401", err)
	}
}

func TestSessionLifetimes(t *testing.T) {
	a, st, clk := newAuth(t, Options{SessionIdle: time.Hour, SessionAbsolute: 3 * time.Hour})
	ctx := t.Context()
	start := func() string {
		w := httptest.NewRecorder()
		if err := a.startSession(ctx, w, request(nil, "192.0.2.1:5"), "alice"); err != nil {
			t.Fatal(err)
		}
		for _, c := range w.Result().Cookies() {
			if c.Name == SessionCookie {
				return c.Value
			}
		}
		t.Fatal("no cookie")
		return ""
	}
	cookie := func(id string) http.Header { return http.Header{"Cookie": {SessionCookie + "=" + id}} }
	id := start()
	// Used every 50 minutes it lives to its absolute end.
	for range 3 {
		clk.Advance(50 * time.Minute)
		if c, err := a.Authenticate(request(cookie(id), "192.0.2.1:5")); err != nil || c.UserID != "alice" || c.Via != ViaSession {
			t.Fatalf("at %v: %+v, %v", clk.Now().Sub(t0), c, err)
		}
	}
	clk.Advance(30 * time.Minute) // 3 h 20 min after the login
	if _, err := a.Authenticate(request(cookie(id), "192.0.2.1:5")); status(err) != 401 {
		t.Errorf("past the absolute end: %v", err)
	}
	if _, err := st.GetBrowserSession(ctx, hashID(id)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an expired session is kept: %v", err)
	}
	// Idle longer than an hour: ended.
	id = start()
	clk.Advance(61 * time.Minute)
	if _, err := a.Authenticate(request(cookie(id), "192.0.2.1:5")); status(err) != 401 {
		t.Errorf("idle for 61 min: %v", err)
	}
	// The sweep removes what is abandoned.
	start()
	clk.Advance(2 * time.Hour)
	if n, err := a.SweepSessions(ctx); err != nil || n != 1 {
		t.Errorf("SweepSessions = %d, %v; want 1", n, err)
	}
	// A cookie too long or empty is refused without a lookup.
	for _, v := range []string{strings.Repeat("a", 200), ""} {
		if _, err := a.Authenticate(request(cookie(v), "192.0.2.9:5")); status(err) != 401 {
			t.Errorf("cookie %.10q: %v", v, err)
		}
	}
}

func TestTrustedHeader(t *testing.T) {
	a, _, _ := newAuth(t, Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}})
	tests := map[string]struct {
		remote string
		vals   []string
		want   int
	}{
		"from the proxy":           {remote: "10.1.2.3:4000", vals: []string{"alice"}, want: 200},
		"from the proxy over ipv6": {remote: "[::1]:4000", vals: []string{"bob"}, want: 200},
		"ipv4-mapped":              {remote: "[::ffff:10.1.2.3]:4000", vals: []string{"alice"}, want: 200},
		"from elsewhere":           {remote: "192.0.2.1:4000", vals: []string{"alice"}, want: 401},
		"unknown user":             {remote: "10.1.2.3:4000", vals: []string{"mallory"}, want: 401},
		"two values":               {remote: "10.1.2.3:4000", vals: []string{"alice", "bob"}, want: 401},
		"not an id":                {remote: "10.1.2.3:4000", vals: []string{"alice@example.com"}, want: 401},
	}
	for name, tt := range tests {
		c, err := a.Authenticate(request(http.Header{DefaultTrustedHeader: tt.vals}, tt.remote))
		if status(err) != tt.want {
			t.Errorf("%s: %v, want %d", name, err, tt.want)
		}
		if tt.want == 200 && (c.UserID != tt.vals[0] || c.Via != ViaHeader) {
			t.Errorf("%s: caller %+v", name, c)
		}
	}
	// Without trusted proxies the header is refused from anywhere.
	b, _, _ := newAuth(t, Options{})
	if _, err := b.Authenticate(request(http.Header{DefaultTrustedHeader: {"alice"}}, "127.0.0.1:1")); status(err) != 401 {
		t.Errorf("header mode off: %v", err)
	}
}

func TestLoginCookieAndReturnPath(t *testing.T) {
	a, _, clk := newAuth(t, Options{OIDC: &OIDCOptions{Issuer: "http://op", ClientID: "c", RedirectURL: "https://cp/auth/callback", LoginKey: bytes.Repeat([]byte("k"), 32)}})
	l := a.oidc
	p := pending{State: "s", Nonce: "n", Verifier: "v", Return: "/", Expires: clk.Now().Add(loginTTL).Unix()}
	v := l.seal(p)
	if got, err := l.open(v, clk.Now()); err != nil || got != p {
		t.Fatalf("open(seal) = %+v, %v", got, err)
	}
	body, sig, _ := strings.Cut(v, ".")
	for name, bad := range map[string]string{
		"tampered body": strings.ToUpper(body[:1]) + body[1:] + "." + sig,
		"no signature":  body,
		"other key":     body + "." + strings.Repeat("A", len(sig)),
		"too long":      strings.Repeat("a", 3000),
	} {
		if _, err := l.open(bad, clk.Now()); err == nil && bad != v {
			t.Errorf("%s: opened", name)
		}
	}
	clk.Advance(loginTTL)
	if _, err := l.open(v, clk.Now()); err == nil {
		t.Error("an expired login cookie opened")
	}
	for in, want := range map[string]string{
		"":                     "/",
		"/":                    "/",
		"/c/abc?x=1":           "/c/abc?x=1",
		"//evil.example/":      "/",
		"/\\evil.example":      "/",
		"https://evil.example": "/",
		"/a/../b":              "/",
		"javascript:alert(1)":  "/",
	} {
		if got := returnPath(in); got != want {
			t.Errorf("returnPath(%q) = %q, want %q", in, got, want)
		}
	}
	for name, o := range map[string]OIDCOptions{
		"no issuer":   {ClientID: "c", RedirectURL: "r", LoginKey: bytes.Repeat([]byte("k"), 32)},
		"short key":   {Issuer: "i", ClientID: "c", RedirectURL: "r", LoginKey: []byte("k")},
		"no redirect": {Issuer: "i", ClientID: "c", LoginKey: bytes.Repeat([]byte("k"), 32)},
	} {
		if _, err := New(a.st, &Options{OIDC: &o}); err == nil {
			t.Errorf("New with %s: no error", name)
		}
	}
}

func TestCallerRoles(t *testing.T) {
	conv := store.Conversation{ID: "c", Tenant: "acme", Env: "prod", UserID: "alice"}
	tests := map[string]struct {
		c         Caller
		see, send bool
	}{
		"owner":                   {c: Caller{UserID: "alice", Memberships: []store.Membership{{Tenant: "acme", Role: store.RoleMember}}}, see: true, send: true},
		"owner of the env":        {c: Caller{UserID: "alice", Memberships: []store.Membership{{Tenant: "acme", Env: "prod", Role: store.RoleMember}}}, see: true, send: true},
		"owner, removed":          {c: Caller{UserID: "alice"}},
		"owner, moved to staging": {c: Caller{UserID: "alice", Memberships: []store.Membership{{Tenant: "acme", Env: "staging", Role: store.RoleMember}}}},
		"member":                  {c: Caller{UserID: "bob", Memberships: []store.Membership{{Tenant: "acme", Role: store.RoleMember}}}},
		"tenant-admin":            {c: Caller{UserID: "carol", Memberships: []store.Membership{{Tenant: "acme", Role: store.RoleTenantAdmin}}}, see: true},
		"env admin":               {c: Caller{UserID: "carol", Memberships: []store.Membership{{Tenant: "acme", Env: "prod", Role: store.RoleTenantAdmin}}}, see: true},
		"another env's admin":     {c: Caller{UserID: "carol", Memberships: []store.Membership{{Tenant: "acme", Env: "staging", Role: store.RoleTenantAdmin}}}},
		"another tenant's admin":  {c: Caller{UserID: "erin", Memberships: []store.Membership{{Tenant: "beta", Role: store.RoleTenantAdmin}}}},
		"local owner":             {c: Caller{UserID: "alice", Via: ViaLocal}, see: true, send: true},
		"local other":             {c: Caller{UserID: "bob", Via: ViaLocal}},
	}
	for name, tt := range tests {
		if got := tt.c.CanSee(conv); got != tt.see {
			t.Errorf("%s: CanSee = %v", name, got)
		}
		if got := tt.c.CanSend(conv); got != tt.send {
			t.Errorf("%s: CanSend = %v", name, got)
		}
	}
}

// TestAPITokenIssuedBefore: a token as a store holds it from before the
// token code was shared (its id, and the SHA-256 of its secret computed
// outside Go) still authenticates.
func TestAPITokenIssuedBefore(t *testing.T) {
	a, st, _ := newAuth(t, Options{})
	const token = "tka_AbCdEfGhIjKl.q8sY3v0mX1cJ7kR2pL9wT4nB6hD5fG0aZ-_eU1iO2yQ"
	hash, _ := hex.DecodeString("92ae3fdcd74512c67b9028bfb9088959e0af4b8f1cf9ef97280b966c1d1ccde5")
	rec := store.APIToken{ID: "AbCdEfGhIjKl", UserID: "bob", Hash: [32]byte(hash), CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	if err := st.AddAPIToken(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	c, err := a.Authenticate(request(http.Header{"Authorization": {"Bearer " + token}}, "192.0.2.1:5"))
	if err != nil || c.UserID != "bob" || c.TokenID != rec.ID {
		t.Fatalf("Authenticate = %+v, %v", c, err)
	}
}
