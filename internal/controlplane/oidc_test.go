package controlplane_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	opstorage "github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	"github.com/talkide/platform/internal/auth"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/roundtrip"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/sqlite"
	"github.com/talkide/platform/internal/trust"
)

// The OpenID Provider is zitadel/oidc's example provider, a real one
// (discovery, authorization code with PKCE, signed ID tokens, UserInfo)
// with two users, test-user2 and test-user@HOST, both with the password
// verysecure. It registers clients in a package-level map, so the tests
// that use it register theirs once.
var registerClient sync.Once

// oidcLogin is a control-plane on TLS (the session cookie is Secure, and a
// cookie jar sends Secure cookies only over https) whose logins go to the
// example provider over plain http.
type oidcLogin struct {
	t      *testing.T
	cpURL  string
	opURL  string
	store  *sqlite.Store
	client *http.Client // with a cookie jar; follows redirects
	// setCookies are the Set-Cookie headers of the callback's answers.
	mu             sync.Mutex
	setCookies     []*http.Cookie
	callbackHeader http.Header
}

func newOIDCLogin(t *testing.T) *oidcLogin { return newOIDCLoginWith(t, nil, nil) }

// groupsStorage is the example provider's storage with a "groups" claim,
// as a deployment's provider would be configured to issue, in the ID
// token and at UserInfo.
type groupsStorage struct {
	*opstorage.Storage
	mu     sync.Mutex
	groups map[string][]any // by subject
}

func (g *groupsStorage) set(subject string, groups ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.groups[subject] = groups
}

func (g *groupsStorage) add(info *oidc.UserInfo, subject string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gs, ok := g.groups[subject]; ok {
		info.AppendClaims("groups", gs)
	}
}

func (g *groupsStorage) SetUserinfoFromRequest(ctx context.Context, info *oidc.UserInfo, token op.IDTokenRequest, scopes []string) error {
	if err := g.Storage.SetUserinfoFromRequest(ctx, info, token, scopes); err != nil {
		return err
	}
	g.add(info, token.GetSubject())
	return nil
}

func (g *groupsStorage) SetUserinfoFromToken(ctx context.Context, info *oidc.UserInfo, tokenID, subject, origin string) error {
	if err := g.Storage.SetUserinfoFromToken(ctx, info, tokenID, subject, origin); err != nil {
		return err
	}
	g.add(info, subject)
	return nil
}

// newOIDCLoginWith is newOIDCLogin whose OIDC options configure changes
// and whose provider issues groups' claims (when groups is set).
func newOIDCLoginWith(t *testing.T, configure func(*auth.OIDCOptions), groups *groupsStorage) *oidcLogin {
	t.Helper()
	ctx := t.Context()
	// The provider needs its issuer before it starts, and the client's
	// redirect URL names the control-plane: both listen before they serve.
	opLn, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	cpLn, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	issuer := "http://" + opLn.Addr().String()
	cpURL := "https://" + cpLn.Addr().String()

	// One redirect URL per test: the registered client carries all of them.
	opstorage.RegisterClients(opstorage.WebClient("talkide-"+cpLn.Addr().String(), "client-secret", cpURL+"/auth/callback"))
	var ops exampleop.Storage = opstorage.NewStorage(opstorage.NewUserStore(issuer))
	if groups != nil {
		groups.Storage = ops.(*opstorage.Storage)
		ops = groups
	}
	op := httptest.NewUnstartedServer(exampleop.SetupServer(issuer, ops, nil, false))
	op.Listener.Close()
	op.Listener = opLn
	op.Start()
	t.Cleanup(op.Close)

	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cp.db"), nil)
	must(t, err)
	t.Cleanup(func() { st.Close() })
	must(t, st.PutEnv(ctx, store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://127.0.0.1:1", CreatedAt: start}))
	for _, u := range []string{"test-user2", "nobody-else"} {
		must(t, st.PutUser(ctx, store.User{ID: u, Name: u, CreatedAt: start}))
	}
	_, err = st.PutMembership(ctx, store.Membership{UserID: "test-user2", Tenant: "acme", Role: store.RoleMember, CreatedAt: start})
	must(t, err)

	oo := &auth.OIDCOptions{
		Issuer: issuer, ClientID: "talkide-" + cpLn.Addr().String(), ClientSecret: "client-secret",
		RedirectURL: cpURL + "/auth/callback", LoginKey: bytes.Repeat([]byte("l"), 32),
	}
	if configure != nil {
		configure(oo)
	}
	a, err := auth.New(st, &auth.Options{Logger: slog.New(slog.DiscardHandler), OIDC: oo})
	must(t, err)
	kr, err := trust.NewKeyring(tokenKID, map[string][]byte{tokenKID: tokenKey})
	must(t, err)
	cp, err := controlplane.New(st, controlplane.Keys{Tokens: kr, CommandSecret: commandSecret, CommandKeyID: commandKID},
		controlplane.TenantEnv{Tenant: "acme", Env: "prod"}, &controlplane.Options{Auth: a})
	must(t, err)
	srv := httptest.NewUnstartedServer(cp.PublicHandler())
	srv.Listener.Close()
	srv.Listener = cpLn
	srv.StartTLS()
	t.Cleanup(srv.Close)

	l := &oidcLogin{t: t, cpURL: cpURL, opURL: issuer, store: st}
	jar, err := cookiejar.New(nil)
	must(t, err)
	l.client = &http.Client{Transport: srv.Client().Transport, Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if resp := req.Response; resp != nil && resp.Request.URL.Path == "/auth/callback" {
				l.mu.Lock()
				l.setCookies = append(l.setCookies, resp.Cookies()...)
				l.callbackHeader = resp.Header.Clone()
				l.mu.Unlock()
			}
			if len(via) > 10 {
				return http.ErrUseLastResponse
			}
			return nil
		}}
	return l
}

var loginFormID = regexp.MustCompile(`name="id" value="([^"]+)"`)

// login goes through the provider's login page as username and returns
// the last answer, with its body, after every redirect.
func (l *oidcLogin) login(username string) (*http.Response, []byte) {
	l.t.Helper()
	resp, body := l.get(l.cpURL + "/auth/login?return=/api/conversations")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Request.URL.String(), l.opURL+"/login/") {
		l.t.Fatalf("login did not reach the provider's form: %d at %s: %s", resp.StatusCode, resp.Request.URL, body)
	}
	m := loginFormID.FindSubmatch(body)
	if m == nil {
		l.t.Fatalf("no auth request id in the provider's form: %s", body)
	}
	form := url.Values{"id": {string(m[1])}, "username": {username}, "password": {"verysecure"}}
	req, err := http.NewRequestWithContext(l.t.Context(), http.MethodPost, l.opURL+"/login/username", strings.NewReader(form.Encode()))
	must(l.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return roundtrip.With(l.t, l.client, req)
}

func (l *oidcLogin) get(u string) (*http.Response, []byte) {
	l.t.Helper()
	return roundtrip.With(l.t, l.client, newRequest(l.t, http.MethodGet, u, ""))
}

func (l *oidcLogin) sessionCookie() string {
	u, _ := url.Parse(l.cpURL)
	for _, c := range l.client.Jar.Cookies(u) {
		if c.Name == auth.SessionCookie {
			return c.Value
		}
	}
	return ""
}

// TestOIDCLogin: log in through the provider, list conversations with the
// session, log out, and be refused; the cookie's flags are as they must be.
func TestOIDCLogin(t *testing.T) {
	l := newOIDCLogin(t)
	resp, body := l.login("test-user2")
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/api/conversations" {
		t.Fatalf("after login: %d at %s: %s", resp.StatusCode, resp.Request.URL, body)
	}
	if !strings.Contains(string(body), `"conversations":[]`) {
		t.Errorf("conversation list: %s", body)
	}
	var session *http.Cookie
	for _, c := range l.setCookies {
		if c.Name == auth.SessionCookie && c.Value != "" {
			session = c
		}
	}
	if session == nil {
		t.Fatalf("the callback set no session cookie: %v", l.setCookies)
	}
	if !session.Secure || !session.HttpOnly || session.SameSite != http.SameSiteLaxMode || session.Path != "/" || session.Domain != "" {
		t.Errorf("session cookie flags: %+v, want Secure, HttpOnly, SameSite=Lax, Path=/, no Domain", session)
	}
	for k, want := range map[string]string{"Referrer-Policy": "no-referrer", "Cache-Control": "no-store"} {
		if got := l.callbackHeader.Get(k); got != want {
			t.Errorf("callback's %s = %q, want %q (its URL holds the code)", k, got, want)
		}
	}
	if got := resp.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("conversation list's Cache-Control = %q, want no-store", got)
	}
	if session.MaxAge <= 0 {
		t.Errorf("session cookie Max-Age %d", session.MaxAge)
	}
	// The (issuer, subject) is linked to the user; the id is stored only
	// as its hash.
	id, err := l.store.GetOIDCIdentity(t.Context(), l.opURL, "id2")
	if err != nil || id.UserID != "test-user2" {
		t.Errorf("OIDC identity: %+v, %v", id, err)
	}
	first := l.sessionCookie()

	// A second login issues a new session id and the old one is ended.
	l.login("test-user2")
	second := l.sessionCookie()
	if second == "" || second == first {
		t.Fatalf("second login: session id %q, first %q", second, first)
	}
	replay := func(id string) int {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, l.cpURL+"/api/conversations", nil)
		req.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: id})
		resp, err := (&http.Client{Transport: l.client.Transport}).Do(req)
		must(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := replay(first); got != http.StatusUnauthorized {
		t.Errorf("the first session after a new login: %d, want 401", got)
	}
	if got := replay(second); got != http.StatusOK {
		t.Errorf("the current session: %d, want 200", got)
	}

	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, l.cpURL+"/auth/logout", nil)
	resp, err = l.client.Do(req)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	if resp, body := l.get(l.cpURL + "/api/conversations"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("after logout: %d %s, want 401", resp.StatusCode, body)
	}
	// The session is gone on the server, not only from the jar.
	if got := replay(second); got != http.StatusUnauthorized {
		t.Errorf("the logged-out session replayed: %d, want 401", got)
	}
}

// TestOIDCLoginRefusals: a provider user nobody added, a forged state and
// a callback without a login in progress start no session.
func TestOIDCLoginRefusals(t *testing.T) {
	l := newOIDCLogin(t)

	// test-user@127.0.0.1 is no user id here.
	resp, body := l.login("test-user@127.0.0.1")
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("unknown user's login: %d %s, want 403", resp.StatusCode, body)
	}
	if l.sessionCookie() != "" {
		t.Error("an unknown user got a session")
	}

	// A login whose state is not the one the cookie remembers.
	resp, _ = l.get(l.cpURL + "/auth/login")
	if !strings.HasPrefix(resp.Request.URL.String(), l.opURL) {
		t.Fatalf("login did not reach the provider: %s", resp.Request.URL)
	}
	resp, body = l.get(l.cpURL + "/auth/callback?code=abc&state=forged")
	if resp.StatusCode != http.StatusUnauthorized || l.sessionCookie() != "" {
		t.Errorf("forged state: %d %s, session %q", resp.StatusCode, body, l.sessionCookie())
	}
	// The login cookie served that one callback: the right state is no
	// use now either.
	resp, body = l.get(l.cpURL + "/auth/callback?code=abc&state=anything")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("callback without a login in progress: %d %s", resp.StatusCode, body)
	}
	// Logins are bounded per source address.
	limited := false
	for range 30 {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, l.cpURL+"/auth/login", nil)
		resp, err := (&http.Client{Transport: l.client.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		must(t, err)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			limited = resp.Header.Get("Retry-After") != ""
			break
		}
	}
	if !limited {
		t.Error("30 logins in a row from one address were never limited (429 with Retry-After)")
	}
}

// TestOIDCTenantsClaim: the provider's groups claim sets the user's
// memberships at each login: a first login the claim gives a tenant
// creates the user; a later login with other groups replaces the
// memberships (a stored one the claim no longer names is removed, one
// added by hand too); values without the prefix, or that do not parse,
// or that name no tenant-env, are ignored; no membership left is 403.
func TestOIDCTenantsClaim(t *testing.T) {
	groups := &groupsStorage{groups: map[string][]any{}}
	l := newOIDCLoginWith(t, func(o *auth.OIDCOptions) {
		o.TenantsClaim, o.TenantsPrefix = "groups", "talkide:"
	}, groups)
	ctx := t.Context()
	must(t, l.store.PutEnv(ctx, store.Env{Tenant: "globex", Name: "dev", WorkerURL: "http://127.0.0.1:1", CreatedAt: start}))
	memberships := func(user string) string {
		ms, err := l.store.ListMemberships(ctx, user, "")
		must(t, err)
		var parts []string
		for _, m := range ms {
			src := "admin"
			if m.FromClaim {
				src = "claim"
			}
			parts = append(parts, m.Tenant+"/"+m.Env+":"+string(m.Role)+"("+src+")")
		}
		return strings.Join(parts, " ")
	}

	// test-user2 was added by hand as a member of every env of acme: the
	// claim adds to it and never removes it.
	groups.set("id2", "talkide:acme/prod:tenant-admin", "engineering", "talkide:globex", "talkide:nope/none", "talkide:bad value")
	resp, body := l.login("test-user2")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("login with groups: %d %s", resp.StatusCode, body)
	}
	if got, want := memberships("test-user2"), "acme/:member(admin) acme/prod:tenant-admin(claim) globex/:member(claim)"; got != want {
		t.Errorf("after the first login: %q, want %q", got, want)
	}

	// A membership added by hand between logins outlives the next one; one
	// the claim made and no longer gives goes; a claim naming a tenant-env
	// the operator set leaves the operator's role.
	_, err := l.store.PutMembership(ctx, store.Membership{UserID: "test-user2", Tenant: "globex", Env: "dev", Role: store.RoleTenantAdmin, CreatedAt: start})
	must(t, err)
	groups.set("id2", "talkide:globex:tenant-admin", "talkide:globex", "talkide:acme:tenant-admin")
	if resp, body := l.login("test-user2"); resp.StatusCode != http.StatusOK {
		t.Fatalf("second login: %d %s", resp.StatusCode, body)
	}
	if got, want := memberships("test-user2"), "acme/:member(admin) globex/:tenant-admin(claim) globex/dev:tenant-admin(admin)"; got != want {
		t.Errorf("after the second login: %q, want %q", got, want)
	}

	// The operator removes theirs and the provider takes the user out of
	// every group: no membership, no session.
	must(t, l.store.DeleteMembership(ctx, "test-user2", "acme", ""))
	must(t, l.store.DeleteMembership(ctx, "test-user2", "globex", "dev"))
	groups.set("id2", "engineering")
	if resp, body := l.login("test-user2"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("login with no tenant left: %d %s, want 403", resp.StatusCode, body)
	}
	if got := memberships("test-user2"); got != "" {
		t.Errorf("memberships after the groups went: %q", got)
	}
	if resp, _ := l.get(l.cpURL + "/api/conversations"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the refused login left a session: %d", resp.StatusCode)
	}
}

// TestOIDCTenantsClaimCreatesUser: a first login whose claim gives a
// tenant creates the user the user claim names; one that gives none
// creates nobody.
func TestOIDCTenantsClaimCreatesUser(t *testing.T) {
	groups := &groupsStorage{groups: map[string][]any{}}
	l := newOIDCLoginWith(t, func(o *auth.OIDCOptions) {
		o.TenantsClaim = "groups"
		o.UserClaim = "given_name" // "Test" for both of the provider's users
	}, groups)
	ctx := t.Context()
	groups.set("id1", "engineering")
	if resp, body := l.login("test-user@127.0.0.1"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("first login with no tenant in the claim: %d %s, want 403", resp.StatusCode, body)
	}
	if _, err := l.store.GetUser(ctx, "Test"); err == nil {
		t.Error("a login the claim gave no tenant created the user")
	}
	groups.set("id1", "acme")
	if resp, body := l.login("test-user@127.0.0.1"); resp.StatusCode != http.StatusOK {
		t.Fatalf("first login with a tenant in the claim: %d %s", resp.StatusCode, body)
	}
	if _, err := l.store.GetUser(ctx, "Test"); err != nil {
		t.Errorf("the user was not created: %v", err)
	}
	if id, err := l.store.GetOIDCIdentity(ctx, l.opURL, "id1"); err != nil || id.UserID != "Test" {
		t.Errorf("identity: %+v %v", id, err)
	}
}
