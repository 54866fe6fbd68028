package auth

import (
	"context"
	"net/http"

	"github.com/talkide/platform/internal/store"
)

// How a caller proved who they are.
const (
	ViaLocal   = "local"   // talkide dev's one user, on loopback
	ViaSession = "session" // a browser session cookie
	ViaToken   = "token"   // an API token
	ViaHeader  = "header"  // an authenticating proxy's header
)

// Caller is who a browser API request comes from and what they may see.
type Caller struct {
	UserID string
	Via    string
	// Memberships are the user's, read at the request's start. A local
	// caller has none and is confined to the control-plane's default
	// tenant-env.
	Memberships []store.Membership
	// TokenID names the API token used, for logs; "" otherwise.
	TokenID string
}

// Local reports whether c is talkide dev's local user.
func (c *Caller) Local() bool { return c.Via == ViaLocal }

// covers reports whether m reaches tenant-env t/e.
func covers(m store.Membership, tenant, env string) bool {
	return m.Tenant == tenant && (m.Env == "" || m.Env == env)
}

// Member reports whether c belongs to tenant-env t/e in any role.
func (c *Caller) Member(tenant, env string) bool {
	for _, m := range c.Memberships {
		if covers(m, tenant, env) {
			return true
		}
	}
	return false
}

// Admin reports whether c is a tenant-admin over tenant-env t/e.
func (c *Caller) Admin(tenant, env string) bool {
	for _, m := range c.Memberships {
		if m.Role == store.RoleTenantAdmin && covers(m, tenant, env) {
			return true
		}
	}
	return false
}

// TenantAdmin reports whether c is a tenant-admin of every env of tenant.
func (c *Caller) TenantAdmin(tenant string) bool {
	for _, m := range c.Memberships {
		if m.Role == store.RoleTenantAdmin && m.Tenant == tenant && m.Env == "" {
			return true
		}
	}
	return false
}

// CanSee reports whether c may read conv (its state, stream, issues and
// usage) and interrupt its turn: its owner while still a member of its
// tenant-env, or a tenant-admin over that tenant-env. The local user sees
// its own.
func (c *Caller) CanSee(conv store.Conversation) bool {
	if c.Local() {
		return conv.UserID == c.UserID
	}
	return (conv.UserID == c.UserID && c.Member(conv.Tenant, conv.Env)) || c.Admin(conv.Tenant, conv.Env)
}

// CanSend reports whether c may send messages in conv: its owner only
// (the worker speaks for the conversation's user), while a member.
func (c *Caller) CanSend(conv store.Conversation) bool {
	if c.Local() {
		return conv.UserID == c.UserID
	}
	return conv.UserID == c.UserID && c.Member(conv.Tenant, conv.Env)
}

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerOf returns the caller an authenticated request carries, or nil.
func CallerOf(r *http.Request) *Caller {
	c, _ := r.Context().Value(callerKey{}).(*Caller)
	return c
}
