package main

import (
	"github.com/spf13/pflag"

	"github.com/talkide/platform/internal/auth"
	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/roles"
)

// addAuthFlags registers talkide controlplane's flags of the browser
// API's authentication into f.
func addAuthFlags(fs *pflag.FlagSet, f *roles.AuthConfig) {
	fs.StringVar(&f.OIDCIssuer, "oidc-issuer", "", "OpenID Provider's issuer URL: turns on the browser login at /auth/login")
	fs.StringVar(&f.OIDCClientID, "oidc-client-id", "", "the control-plane's client id at the provider")
	fs.StringVar(&f.OIDCClientSecretFile, "oidc-client-secret-file", "", "file holding the client secret (none: a public client, PKCE alone)")
	fs.StringVar(&f.OIDCRedirectURL, "oidc-redirect-url", "", "the callback URL registered at the provider: https://HOST/auth/callback")
	fs.StringVar(&f.OIDCUserClaim, "oidc-user-claim", auth.DefaultUserClaim, "the ID token or UserInfo claim that names the user at their first login (talkide admin user add --user)")
	fs.StringVar(&f.OIDCTenantsClaim, "oidc-tenants-claim", "", "a claim (e.g. groups) whose values TENANT[/ENV][:ROLE] set the user's memberships at each login, replacing the stored ones; default none (talkide admin user add only)")
	fs.StringVar(&f.OIDCTenantsPrefix, "oidc-tenants-prefix", "", "with --oidc-tenants-claim: only the values starting with this (e.g. talkide:), which is removed before they are read")
	fs.StringSliceVar(&f.TrustedProxies, "trusted-proxies", nil, "CIDRs of authenticating proxies whose --trusted-header names the user (e.g. 10.0.0.5/32); repeat or separate with commas; default none (header refused)")
	fs.StringVar(&f.TrustedHeader, "trusted-header", auth.DefaultTrustedHeader, "the header a trusted proxy names the user in")
	fs.DurationVar(&f.SessionIdle, "session-idle", auth.DefaultSessionIdle, "a browser session unused this long ends")
	fs.DurationVar(&f.SessionAbsolute, "session-absolute", auth.DefaultSessionAbsolute, "a browser session ends this long after its login, however active")
	cli.BindEnv(fs, "oidc-issuer", "oidc-client-id", "oidc-client-secret-file", "oidc-redirect-url", "oidc-user-claim",
		"oidc-tenants-claim", "oidc-tenants-prefix",
		"trusted-proxies", "trusted-header", "session-idle", "session-absolute")
}
