package roles

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

	"github.com/talkide/platform/internal/auth"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/trust"
)

// AuthConfig is how the browser API authenticates without a local user
// (docs/accounts.md): an OpenID Connect login, a trusted proxy's header,
// session lifetimes. API tokens need nothing: they always work.
type AuthConfig struct {
	OIDCIssuer, OIDCClientID, OIDCClientSecretFile, OIDCRedirectURL, OIDCUserClaim string
	OIDCTenantsClaim, OIDCTenantsPrefix                                            string
	TrustedProxies                                                                 []string
	TrustedHeader                                                                  string
	SessionIdle, SessionAbsolute                                                   time.Duration
}

// authenticator builds the browser API's authenticator. The login key,
// which signs a login in progress, is derived from the command secret, so
// that every replica sharing the secrets file shares it.
func (f *AuthConfig) authenticator(st store.Store, secrets *trust.Secrets, logger *slog.Logger) (*auth.Authenticator, error) {
	o := &auth.Options{SessionIdle: f.SessionIdle, SessionAbsolute: f.SessionAbsolute, TrustedHeader: f.TrustedHeader, Logger: logger}
	for _, c := range f.TrustedProxies {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return nil, fmt.Errorf("--trusted-proxies %q: want a CIDR such as 10.0.0.5/32: %w", c, err)
		}
		o.TrustedProxies = append(o.TrustedProxies, p.Masked())
	}
	if f.OIDCIssuer != "" {
		if f.OIDCClientID == "" || f.OIDCRedirectURL == "" {
			return nil, errors.New("--oidc-issuer needs --oidc-client-id and --oidc-redirect-url")
		}
		if !secureRedirect(f.OIDCRedirectURL) {
			return nil, fmt.Errorf("--oidc-redirect-url %q: want an https:// URL, or http:// on a loopback address (the session cookie is Secure)", f.OIDCRedirectURL)
		}
		var secret string
		if f.OIDCClientSecretFile != "" {
			b, err := os.ReadFile(f.OIDCClientSecretFile)
			if err != nil {
				return nil, fmt.Errorf("--oidc-client-secret-file: %w", err)
			}
			secret = strings.TrimSpace(string(b))
		}
		o.OIDC = &auth.OIDCOptions{Issuer: f.OIDCIssuer, ClientID: f.OIDCClientID, ClientSecret: secret,
			RedirectURL: f.OIDCRedirectURL, UserClaim: f.OIDCUserClaim, LoginKey: secrets.LoginKey,
			TenantsClaim: f.OIDCTenantsClaim, TenantsPrefix: f.OIDCTenantsPrefix}
	}
	if f.OIDCTenantsPrefix != "" && f.OIDCTenantsClaim == "" {
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
