package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/talkide/platform/internal/auth"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/store"
)

// authFlags are talkide controlplane's flags of the browser API's
// authentication (docs/accounts.md): an OpenID Connect login, a trusted
// proxy's header, session lifetimes. API tokens need no flag: without a
// local user they always work.
type authFlags struct {
	oidcIssuer, oidcClientID, oidcSecretFile, oidcRedirect, oidcUserClaim string
	oidcTenantsClaim, oidcTenantsPrefix                                   string
	trustedProxies                                                        []string
	trustedHeader                                                         string
	sessionIdle, sessionAbsolute                                          time.Duration
}

func (f *authFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.oidcIssuer, "oidc-issuer", "", "OpenID Provider's issuer URL: turns on the browser login at /auth/login")
	fs.StringVar(&f.oidcClientID, "oidc-client-id", "", "the control-plane's client id at the provider")
	fs.StringVar(&f.oidcSecretFile, "oidc-client-secret-file", "", "file holding the client secret (none: a public client, PKCE alone)")
	fs.StringVar(&f.oidcRedirect, "oidc-redirect-url", "", "the callback URL registered at the provider: https://HOST/auth/callback")
	fs.StringVar(&f.oidcUserClaim, "oidc-user-claim", auth.DefaultUserClaim, "the ID token or UserInfo claim that names the user at their first login (talkide admin user add --user)")
	fs.StringVar(&f.oidcTenantsClaim, "oidc-tenants-claim", "", "a claim (e.g. groups) whose values TENANT[/ENV][:ROLE] set the user's memberships at each login, replacing the stored ones; default none (talkide admin user add only)")
	fs.StringVar(&f.oidcTenantsPrefix, "oidc-tenants-prefix", "", "with --oidc-tenants-claim: only the values starting with this (e.g. talkide:), which is removed before they are read")
	fs.StringSliceVar(&f.trustedProxies, "trusted-proxies", nil, "CIDRs of authenticating proxies whose --trusted-header names the user (e.g. 10.0.0.5/32); repeat or separate with commas; default none (header refused)")
	fs.StringVar(&f.trustedHeader, "trusted-header", auth.DefaultTrustedHeader, "the header a trusted proxy names the user in")
	fs.DurationVar(&f.sessionIdle, "session-idle", auth.DefaultSessionIdle, "a browser session unused this long ends")
	fs.DurationVar(&f.sessionAbsolute, "session-absolute", auth.DefaultSessionAbsolute, "a browser session ends this long after its login, however active")
	bindEnv(fs, "oidc-issuer", "oidc-client-id", "oidc-client-secret-file", "oidc-redirect-url", "oidc-user-claim",
		"oidc-tenants-claim", "oidc-tenants-prefix",
		"trusted-proxies", "trusted-header", "session-idle", "session-absolute")
}

// authenticator builds the browser API's authenticator. The login key,
// which signs a login in progress, is derived from the command secret, so
// that every replica sharing the secrets file shares it.
func (f *authFlags) authenticator(st store.Store, secrets *cpSecrets, logger *slog.Logger) (*auth.Authenticator, error) {
	o := &auth.Options{SessionIdle: f.sessionIdle, SessionAbsolute: f.sessionAbsolute, TrustedHeader: f.trustedHeader, Logger: logger}
	for _, c := range f.trustedProxies {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return nil, fmt.Errorf("--trusted-proxies %q: want a CIDR such as 10.0.0.5/32: %w", c, err)
		}
		o.TrustedProxies = append(o.TrustedProxies, p.Masked())
	}
	if f.oidcIssuer != "" {
		if f.oidcClientID == "" || f.oidcRedirect == "" {
			return nil, errors.New("--oidc-issuer needs --oidc-client-id and --oidc-redirect-url")
		}
		if !secureRedirect(f.oidcRedirect) {
			return nil, fmt.Errorf("--oidc-redirect-url %q: want an https:// URL, or http:// on a loopback address (the session cookie is Secure)", f.oidcRedirect)
		}
		var secret string
		if f.oidcSecretFile != "" {
			b, err := os.ReadFile(f.oidcSecretFile)
			if err != nil {
				return nil, fmt.Errorf("--oidc-client-secret-file: %w", err)
			}
			secret = strings.TrimSpace(string(b))
		}
		o.OIDC = &auth.OIDCOptions{Issuer: f.oidcIssuer, ClientID: f.oidcClientID, ClientSecret: secret,
			RedirectURL: f.oidcRedirect, UserClaim: f.oidcUserClaim, LoginKey: secrets.LoginKey,
			TenantsClaim: f.oidcTenantsClaim, TenantsPrefix: f.oidcTenantsPrefix}
	}
	if f.oidcTenantsPrefix != "" && f.oidcTenantsClaim == "" {
		return nil, errors.New("--oidc-tenants-prefix needs --oidc-tenants-claim")
	}
	return auth.New(st, o)
}

// secureRedirect reports whether a callback URL is one a browser sends the
// Secure session cookie to: https, or http on a loopback address, which
// browsers count as a secure context (a control-plane reached through a
// port forward, and the browser tests).
func secureRedirect(s string) bool {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return false
	}
	switch u.Scheme {
	case "https":
		return true
	case "http":
		return httpapi.LoopbackHost(u.Host)
	}
	return false
}

// sweepSessions deletes abandoned browser sessions every interval, and
// ended rate-limit windows every minute, until ctx ends.
func sweepSessions(ctx context.Context, a *auth.Authenticator, interval time.Duration, logger *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	// The shared rate-limit counts of ended windows go every minute: a
	// flood of distinct source addresses leaves a row each.
	rates := time.NewTicker(time.Minute)
	defer rates.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-rates.C:
			if _, err := a.SweepRates(ctx); err != nil && ctx.Err() == nil {
				logger.Warn("sweeping rate-limit counts failed", "err", err)
			}
		case <-t.C:
			if n, err := a.SweepSessions(ctx); err != nil && ctx.Err() == nil {
				logger.Warn("sweeping expired browser sessions failed", "err", err)
			} else if n > 0 {
				logger.Info("expired browser sessions deleted", "sessions", n)
			}
		}
	}
}
