// Package auth says who calls the control-plane's browser API: a browser
// session from an OpenID Connect login, a user's API token, an
// authenticating proxy's header, or talkide dev's one local user; and, by
// the caller's tenant memberships, what they may see (Caller).
package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/store"
)

// SessionCookie is the browser session's cookie. The __Host- prefix makes
// browsers keep it only when it is Secure, has Path=/ and no Domain: no
// sibling host and no plain-http page can set or shadow it.
const SessionCookie = "__Host-talkide_session"

// DefaultTrustedHeader names the user an authenticating proxy vouches for.
const DefaultTrustedHeader = "X-Forwarded-User"

// Default lifetimes and rates; Options documents them.
const (
	DefaultSessionIdle     = 12 * time.Hour
	DefaultSessionAbsolute = 7 * 24 * time.Hour
	DefaultLoginsPerMinute = 20
	DefaultTokenPerMinute  = 600
	// failures of credentials from one source address, per minute
	failuresPerMinute = 30
	maxLimiterKeys    = 10000
	// touchEvery is how stale a session's LastSeenAt may be before a
	// request writes it: the idle lifetime is kept to that precision at
	// the cost of one write a minute per active browser.
	touchEvery = time.Minute
)

// Options configure an Authenticator; the zero value of each field is its
// default.
type Options struct {
	// SessionIdle ends a browser session unused this long; default
	// DefaultSessionIdle. SessionAbsolute ends it this long after the
	// login, however active; default DefaultSessionAbsolute.
	SessionIdle     time.Duration
	SessionAbsolute time.Duration
	// TrustedProxies are the source addresses whose TrustedHeader names
	// the user (an authenticating proxy in front of the control-plane).
	// Empty: the header mode is off, and a request that carries the header
	// is refused rather than served as someone else.
	TrustedProxies []netip.Prefix
	TrustedHeader  string // default DefaultTrustedHeader
	// OIDC, when set, serves the OpenID Connect login under /auth/.
	OIDC *OIDCOptions
	// LoginsPerMinute bounds logins (and callbacks) per source address;
	// TokenPerMinute the requests of one API token. Defaults
	// DefaultLoginsPerMinute and DefaultTokenPerMinute.
	LoginsPerMinute float64
	TokenPerMinute  float64
	Logger          *slog.Logger // nil: don't log
	Now             func() time.Time
}

// Authenticator resolves the caller of a browser API request.
type Authenticator struct {
	st   store.Store
	o    Options
	log  *slog.Logger
	oidc *oidcLogin // nil without OIDC

	logins   limiter // per source address
	failures limiter // per source address
	tokens   limiter // per API token id
	// rates is the store's shared counts when the limiters use them
	// (SweepRates); nil when they count in memory.
	rates store.RateWindows
}

// New returns an authenticator on st. With OIDC it needs a login key of at
// least 32 bytes, which signs the short-lived state of a login in progress
// (every replica must share it).
func New(st store.Store, opts *Options) (*Authenticator, error) {
	if st == nil {
		return nil, errors.New("auth: a store is required")
	}
	o := defaults.Copy(opts)
	defaults.IfNotPositive(&o.SessionIdle, DefaultSessionIdle)
	defaults.IfNotPositive(&o.SessionAbsolute, DefaultSessionAbsolute)
	defaults.IfZero(&o.TrustedHeader, DefaultTrustedHeader)
	defaults.IfNotPositive(&o.LoginsPerMinute, DefaultLoginsPerMinute)
	defaults.IfNotPositive(&o.TokenPerMinute, DefaultTokenPerMinute)
	defaults.Logger(&o.Logger)
	defaults.Clock(&o.Now)
	a := &Authenticator{st: st, o: o, log: o.Logger}
	if rw, ok := st.(store.RateWindows); ok {
		// Several replicas may share this store: count where all of them
		// do (docs/accounts.md).
		a.rates = rw
		a.logins = newSharedLimiter(rw, "login", o.LoginsPerMinute, o.Logger)
		a.failures = newSharedLimiter(rw, "failure", failuresPerMinute, o.Logger)
		a.tokens = newSharedLimiter(rw, "token", o.TokenPerMinute, o.Logger)
	} else {
		a.logins = newLimiters(o.LoginsPerMinute, max(int(o.LoginsPerMinute/2), 5), maxLimiterKeys)
		a.failures = newLimiters(failuresPerMinute, failuresPerMinute, maxLimiterKeys)
		a.tokens = newLimiters(o.TokenPerMinute, max(int(o.TokenPerMinute/5), 10), maxLimiterKeys)
	}
	if o.OIDC != nil {
		l, err := newOIDCLogin(a, *o.OIDC)
		if err != nil {
			return nil, err
		}
		a.oidc = l
	}
	return a, nil
}

// unauthorized is every credential failure's answer: the same for a
// missing, malformed, unknown, expired or revoked credential, so that the
// answer tells an attacker nothing. why goes to the log only.
func unauthorized(why error) error {
	return &httpapi.Error{Status: http.StatusUnauthorized, Code: contract.CodeUnauthorized,
		Msg: "log in, or send an API token (Authorization: Bearer tka_…)", Err: why}
}

func rateLimited(retry string) error {
	return &httpapi.Error{Status: http.StatusTooManyRequests, Code: contract.CodeRateLimited,
		Msg: "too many requests; retry later", RetryAfter: retry}
}

// sourceIP is the request's peer address: a header such as
// X-Forwarded-For is never believed, so that a client cannot pick the
// bucket it is limited in.
func sourceIP(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return ip.Unmap()
}

// Authenticate returns the request's caller: an API token in an
// Authorization header, else a session cookie, else a trusted proxy's
// header. A credential that is present but not valid is refused, never
// skipped for the next kind.
func (a *Authenticator) Authenticate(r *http.Request) (*Caller, error) {
	ctx := r.Context()
	now := a.o.Now()
	src := sourceIP(r)
	if a.failures.blocked(ctx, src.String(), now) {
		return nil, rateLimited("60")
	}
	c, err := a.authenticate(ctx, r, now)
	if err != nil {
		var he *httpapi.Error
		if errors.As(err, &he) && he.Status == http.StatusUnauthorized {
			a.failures.allow(ctx, src.String(), now)
			a.log.Info("browser API credential refused", "source", src.String(), "reason", he.Err)
		}
		return nil, err
	}
	if c.TokenID != "" {
		if ok, retry := a.tokens.allow(ctx, c.TokenID, now); !ok {
			return nil, rateLimited(retry)
		}
	}
	ms, err := a.st.ListMemberships(ctx, c.UserID, "")
	if err != nil {
		return nil, err
	}
	c.Memberships = ms
	return c, nil
}

func (a *Authenticator) authenticate(ctx context.Context, r *http.Request, now time.Time) (*Caller, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return nil, unauthorized(errors.New("an Authorization header that is not Bearer"))
		}
		rec, err := a.apiToken(ctx, strings.TrimSpace(tok), now)
		if err != nil {
			return nil, err
		}
		return &Caller{UserID: rec.UserID, Via: ViaToken, TokenID: rec.ID}, nil
	}
	if ck, err := r.Cookie(SessionCookie); err == nil {
		s, err := a.session(ctx, ck.Value, now)
		if err != nil {
			return nil, err
		}
		return &Caller{UserID: s.UserID, Via: ViaSession}, nil
	}
	if vals := r.Header.Values(a.o.TrustedHeader); len(vals) > 0 {
		return a.trustedHeader(ctx, r, vals)
	}
	return nil, unauthorized(errors.New("no credential"))
}

// trustedHeader believes the proxy's header only from an allow-listed
// source; from anywhere else the request is refused, not served as the
// user it names nor as anonymous.
func (a *Authenticator) trustedHeader(ctx context.Context, r *http.Request, vals []string) (*Caller, error) {
	src := sourceIP(r)
	trusted := false
	for _, p := range a.o.TrustedProxies {
		if src.IsValid() && p.Contains(src) {
			trusted = true
			break
		}
	}
	if !trusted {
		return nil, unauthorized(fmt.Errorf("%s from %s, which is not a trusted proxy", a.o.TrustedHeader, src))
	}
	if len(vals) != 1 || contract.ValidateID("user", vals[0]) != nil {
		return nil, unauthorized(fmt.Errorf("%s is not one user id", a.o.TrustedHeader))
	}
	if _, err := a.st.GetUser(ctx, vals[0]); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, unauthorized(fmt.Errorf("%s names unknown user %s", a.o.TrustedHeader, vals[0]))
		}
		return nil, err
	}
	return &Caller{UserID: vals[0], Via: ViaHeader}, nil
}

// hashID is how the store finds a session: the SHA-256 of its id.
func hashID(id string) [32]byte { return sha256.Sum256([]byte(id)) }
