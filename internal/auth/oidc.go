package auth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/trust"
)

// The OpenID Connect login: the authorization code flow with PKCE, state
// and nonce. GET /auth/login sends the browser to the provider with a
// signed, short-lived cookie that remembers the state, nonce and PKCE
// verifier; GET /auth/callback checks them, exchanges the code, verifies
// the ID token and starts a session; POST /auth/logout ends it.

// loginCookie holds a login in progress. Path=/ because the __Host- prefix
// demands it; SameSite=Lax lets it come back on the provider's redirect,
// which is a top-level navigation.
const loginCookie = "__Host-talkide_login"

// loginTTL is how long a user has to complete a login at the provider.
const loginTTL = 10 * time.Minute

// DefaultUserClaim is the claim that names the user at their first login.
const DefaultUserClaim = "preferred_username"

// OIDCOptions configure the login with an OpenID Provider.
type OIDCOptions struct {
	Issuer       string // the provider's issuer URL, discovered at the first login
	ClientID     string
	ClientSecret string // "" for a public client (PKCE alone)
	// RedirectURL is this control-plane's callback as the provider knows
	// it: https://HOST/auth/callback.
	RedirectURL string
	Scopes      []string // default openid, profile, email
	// UserClaim names the user at their first login (default
	// DefaultUserClaim); the user must have been added (talkide admin user
	// add) under that id. From then on the provider's (issuer, subject)
	// finds the user, whatever the claim says later.
	UserClaim string
	// TenantsClaim, when set, names a claim (from the ID token, else from
	// UserInfo; a string or an array of strings) whose values give the
	// user's memberships at each login, as ParseTenantClaim reads them:
	// the login sets the stored memberships to exactly those, so that a
	// user the provider takes out of a group loses the tenant at their
	// next login. A first login that the claim gives a membership creates
	// the user. TenantsPrefix, when set, keeps only the values that start
	// with it (removed before parsing), so that the provider's other
	// groups are left alone.
	TenantsClaim  string
	TenantsPrefix string
	// LoginKey signs the login-in-progress cookie: at least 32 bytes, the
	// same on every replica.
	LoginKey []byte
	// HTTPClient talks to the provider; nil: http.DefaultClient.
	HTTPClient *http.Client
}

type oidcLogin struct {
	a *Authenticator
	o OIDCOptions

	mu       sync.Mutex // guards provider and verifier
	provider *oidc.Provider
	verifier *oidc.IDTokenVerifier
}

func newOIDCLogin(a *Authenticator, o OIDCOptions) (*oidcLogin, error) {
	if o.Issuer == "" || o.ClientID == "" || o.RedirectURL == "" {
		return nil, errors.New("auth: OIDC needs an issuer, a client id and a redirect URL")
	}
	if len(o.LoginKey) < 32 {
		return nil, errors.New("auth: OIDC needs a login key of at least 32 bytes")
	}
	if len(o.Scopes) == 0 {
		o.Scopes = []string{oidc.ScopeOpenID, "profile", "email"}
	}
	if o.UserClaim == "" {
		o.UserClaim = DefaultUserClaim
	}
	if o.HTTPClient == nil {
		o.HTTPClient = http.DefaultClient
	}
	return &oidcLogin{a: a, o: o}, nil
}

// discover returns the provider, fetching its configuration the first
// time it succeeds: a provider that is down at start does not stop the
// control-plane, only logins.
func (l *oidcLogin) discover(ctx context.Context) (*oidc.Provider, *oidc.IDTokenVerifier, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.provider != nil {
		return l.provider, l.verifier, nil
	}
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, l.o.HTTPClient), l.o.Issuer)
	if err != nil {
		return nil, nil, &httpapi.Error{Status: http.StatusBadGateway, Code: contract.CodeUnavailable,
			Msg: "the identity provider is unreachable; try again shortly", Err: err}
	}
	l.provider = p
	l.verifier = p.VerifierContext(oidc.ClientContext(context.Background(), l.o.HTTPClient),
		&oidc.Config{ClientID: l.o.ClientID, Now: l.a.o.Now})
	return l.provider, l.verifier, nil
}

func (l *oidcLogin) config(p *oidc.Provider) *oauth2.Config {
	return &oauth2.Config{ClientID: l.o.ClientID, ClientSecret: l.o.ClientSecret, RedirectURL: l.o.RedirectURL,
		Endpoint: p.Endpoint(), Scopes: l.o.Scopes}
}

// pending is a login in progress, as its cookie carries it.
type pending struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	Return   string `json:"r"`
	Expires  int64  `json:"e"` // unix seconds
}

func (l *oidcLogin) mac(b []byte) []byte {
	m := hmac.New(sha256.New, l.o.LoginKey)
	m.Write([]byte("talkide-login\x00"))
	m.Write(b)
	return m.Sum(nil)
}

func (l *oidcLogin) seal(p pending) string {
	b, _ := json.Marshal(p)
	return base64.RawURLEncoding.EncodeToString(b) + "." + base64.RawURLEncoding.EncodeToString(l.mac(b))
}

func (l *oidcLogin) open(v string, now time.Time) (pending, error) {
	body, sig, ok := strings.Cut(v, ".")
	if !ok || len(v) > 2048 {
		return pending{}, errors.New("malformed login cookie")
	}
	b, err1 := base64.RawURLEncoding.DecodeString(body)
	s, err2 := base64.RawURLEncoding.DecodeString(sig)
	if err1 != nil || err2 != nil || !hmac.Equal(s, l.mac(b)) {
		return pending{}, errors.New("login cookie not signed by this control-plane")
	}
	var p pending
	if err := json.Unmarshal(b, &p); err != nil {
		return pending{}, errors.New("malformed login cookie")
	}
	if now.Unix() >= p.Expires {
		return pending{}, errors.New("the login took too long")
	}
	return p, nil
}

// returnPath keeps a return target only when it is a path on this host:
// never a scheme, a host ("//evil") or a backslash some browsers read as
// a slash.
func returnPath(s string) string {
	if s == "" || len(s) > 512 || s[0] != '/' || strings.HasPrefix(s, "//") || strings.ContainsAny(s, "\\\r\n") || !httpapi.CanonicalPath(strings.SplitN(s, "?", 2)[0]) {
		return "/"
	}
	return s
}

// Handler serves /auth/login, /auth/callback and /auth/logout. Without OIDC
// only /auth/logout is served (it ends a session of any kind), and the
// others answer 404.
func (a *Authenticator) Handler() http.Handler {
	mux := http.NewServeMux()
	h := func(f httpapi.HandlerFunc) http.Handler {
		return httpapi.Handle(a.log, func(w http.ResponseWriter, r *http.Request) error {
			// The callback's URL holds the code and state: no Referer may
			// carry them on, and no cache may keep an answer.
			w.Header().Set("Referrer-Policy", "no-referrer")
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("X-Frame-Options", "DENY")
			return f(w, r)
		})
	}
	if a.oidc != nil {
		mux.Handle("GET /auth/login", h(a.oidc.handleLogin))
		mux.Handle("GET /auth/callback", h(a.oidc.handleCallback))
		mux.Handle("/auth/login", httpapi.MethodNotAllowed(a.log, http.MethodGet))
		mux.Handle("/auth/callback", httpapi.MethodNotAllowed(a.log, http.MethodGet))
	}
	mux.Handle("POST /auth/logout", h(a.handleLogout))
	mux.Handle("/auth/logout", httpapi.MethodNotAllowed(a.log, http.MethodPost))
	mux.Handle("/", h(func(http.ResponseWriter, *http.Request) error {
		return httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound, "no such endpoint")
	}))
	return mux
}

func (a *Authenticator) limitLogin(r *http.Request) error {
	if ok, retry := a.logins.allow(r.Context(), sourceIP(r).String(), a.o.Now()); !ok {
		return rateLimited(retry)
	}
	return nil
}

func (l *oidcLogin) handleLogin(w http.ResponseWriter, r *http.Request) error {
	if err := l.a.limitLogin(r); err != nil {
		return err
	}
	p, _, err := l.discover(r.Context())
	if err != nil {
		return err
	}
	pend := pending{
		State: trust.RandomID(24), Nonce: trust.RandomID(24), Verifier: oauth2.GenerateVerifier(),
		Return: returnPath(r.URL.Query().Get("return")), Expires: l.a.o.Now().Add(loginTTL).Unix(),
	}
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: l.seal(pend), Path: "/", MaxAge: int(loginTTL / time.Second),
		Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	u := l.config(p).AuthCodeURL(pend.State, oidc.Nonce(pend.Nonce), oauth2.S256ChallengeOption(pend.Verifier))
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, u, http.StatusFound)
	return nil
}

func loginFailed(why error) error {
	return &httpapi.Error{Status: http.StatusUnauthorized, Code: contract.CodeUnauthorized,
		Msg: "the login did not complete; start again at /auth/login", Err: why}
}

func (l *oidcLogin) handleCallback(w http.ResponseWriter, r *http.Request) error {
	if err := l.a.limitLogin(r); err != nil {
		return err
	}
	ctx := r.Context()
	now := l.a.o.Now()
	ck, err := r.Cookie(loginCookie)
	if err != nil {
		return loginFailed(errors.New("no login cookie"))
	}
	// The login cookie serves one callback, whatever its outcome.
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: "/", MaxAge: -1, Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	// So does the session the browser came with: a login that fails (the
	// provider no longer puts the user in any tenant, say) leaves none.
	l.a.endSession(ctx, r)
	http.SetCookie(w, sessionCookie("", -1))
	pend, err := l.open(ck.Value, now)
	if err != nil {
		return loginFailed(err)
	}
	q := r.URL.Query()
	if state := q.Get("state"); subtle.ConstantTimeCompare([]byte(state), []byte(pend.State)) != 1 {
		return loginFailed(errors.New("state does not match"))
	}
	if e := q.Get("error"); e != "" {
		return loginFailed(fmt.Errorf("the provider answered %.64q", e))
	}
	code := q.Get("code")
	if code == "" || len(code) > 4096 {
		return loginFailed(errors.New("no code"))
	}
	p, verifier, err := l.discover(ctx)
	if err != nil {
		return err
	}
	octx := oidc.ClientContext(ctx, l.o.HTTPClient)
	tok, err := l.config(p).Exchange(octx, code, oauth2.VerifierOption(pend.Verifier))
	if err != nil {
		return loginFailed(fmt.Errorf("code exchange: %w", err))
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return loginFailed(errors.New("no ID token in the token response"))
	}
	idt, err := verifier.Verify(octx, raw)
	if err != nil {
		return loginFailed(fmt.Errorf("ID token: %w", err))
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(pend.Nonce)) != 1 {
		return loginFailed(errors.New("ID token nonce does not match"))
	}
	claims, err := newLoginClaims(octx, p, tok, idt)
	if err != nil {
		return loginFailed(err)
	}
	userID, err := l.user(octx, idt, claims)
	if err != nil {
		return err
	}
	var ms []store.Membership
	if l.o.TenantsClaim != "" {
		want, ignored := claimMemberships(userID, l.o.TenantsPrefix, claimStrings(claims.get(l.o.TenantsClaim)))
		var more []string
		if ms, more, err = syncMemberships(ctx, l.a.st, userID, want, now.UTC()); err != nil {
			return err
		}
		if ignored = append(ignored, more...); len(ignored) > 0 {
			l.a.log.Info("values of the tenants claim ignored", "user", userID, "claim", l.o.TenantsClaim, "ignored", ignored)
		}
	} else if ms, err = l.a.st.ListMemberships(ctx, userID, ""); err != nil {
		return err
	}
	if len(ms) == 0 {
		return &httpapi.Error{Status: http.StatusForbidden, Code: contract.CodeForbidden,
			Msg: "you are not a member of any tenant here; ask a tenant's administrator to add you", Err: fmt.Errorf("user %s has no membership", userID)}
	}
	if err := l.a.startSession(ctx, w, r, userID); err != nil {
		return err
	}
	l.a.log.Info("logged in", "user", userID, "issuer", idt.Issuer)
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, pend.Return, http.StatusSeeOther)
	return nil
}

// loginClaims are a login's claims: the ID token's and, for a claim it
// lacks, the UserInfo endpoint's, fetched at most once.
type loginClaims struct {
	id, info map[string]any
	fetch    func() map[string]any
}

func newLoginClaims(ctx context.Context, p *oidc.Provider, tok *oauth2.Token, idt *oidc.IDToken) (*loginClaims, error) {
	c := &loginClaims{}
	if err := idt.Claims(&c.id); err != nil {
		return nil, err
	}
	c.fetch = func() map[string]any {
		var more map[string]any
		if info, err := p.UserInfo(ctx, oauth2.StaticTokenSource(tok)); err == nil {
			info.Claims(&more)
		}
		return more
	}
	return c, nil
}

func (c *loginClaims) get(name string) any {
	if v, ok := c.id[name]; ok {
		return v
	}
	if c.fetch != nil {
		c.info, c.fetch = c.fetch(), nil
	}
	return c.info[name]
}

// user maps the ID token's (issuer, subject) to a user; at the first login
// it links them to the user the UserClaim names, who must exist, or whom
// the tenants claim gives a membership (then the user is created).
func (l *oidcLogin) user(ctx context.Context, idt *oidc.IDToken, claims *loginClaims) (string, error) {
	id, err := l.a.st.GetOIDCIdentity(ctx, idt.Issuer, idt.Subject)
	if err == nil {
		return id.UserID, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return "", err
	}
	name, _ := claims.get(l.o.UserClaim).(string)
	forbidden := func(why error) error {
		return &httpapi.Error{Status: http.StatusForbidden, Code: contract.CodeForbidden,
			Msg: "this account is not known here; ask a tenant's administrator to add you", Err: why}
	}
	if contract.ValidateID("user", name) != nil {
		return "", forbidden(fmt.Errorf("claim %s of subject %s is not a user id", l.o.UserClaim, idt.Subject))
	}
	if _, err := l.a.st.GetUser(ctx, name); err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			return "", err
		}
		if l.o.TenantsClaim == "" {
			return "", forbidden(fmt.Errorf("no user %s", name))
		}
		ms, _ := claimMemberships(name, l.o.TenantsPrefix, claimStrings(claims.get(l.o.TenantsClaim)))
		if ok, err := anyExists(ctx, l.a.st, ms); err != nil {
			return "", err
		} else if !ok {
			return "", forbidden(fmt.Errorf("no user %s, and claim %s gives no membership of a tenant-env here", name, l.o.TenantsClaim))
		}
		if err := l.a.st.PutUser(ctx, store.User{ID: name, Name: name, CreatedAt: l.a.o.Now().UTC()}); err != nil {
			return "", err
		}
		l.a.log.Info("user created at their first login", "user", name, "claim", l.o.TenantsClaim)
	}
	stored, _, err := l.a.st.PutOIDCIdentity(ctx, store.OIDCIdentity{Issuer: idt.Issuer, Subject: idt.Subject, UserID: name, CreatedAt: l.a.o.Now().UTC()})
	if err != nil {
		return "", err
	}
	return stored.UserID, nil
}

func (a *Authenticator) handleLogout(w http.ResponseWriter, r *http.Request) error {
	a.endSession(r.Context(), r)
	http.SetCookie(w, sessionCookie("", -1))
	w.WriteHeader(http.StatusNoContent)
	return nil
}
