package controlplane

import (
	"net/http"
	"slices"
	"strings"

	"github.com/talkide/platform/internal/auth"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/store"
)

// Which tenant-env a new conversation goes to, and which conversations a
// caller lists. The worker that serves a conversation is always found from
// the tenant-env stored with it (workerFor(c.Tenant, c.Env)), never from
// the request.

func viewOf(c store.Conversation) ConversationView {
	v := ConversationView{ID: c.ID, Title: c.Title, Tenant: c.Tenant, Env: c.Env, User: c.UserID, CreatedAt: c.CreatedAt, LastActivityAt: c.LastActivityAt}
	if !c.ArchivedAt.IsZero() {
		at := c.ArchivedAt
		v.ArchivedAt = &at
	}
	return v
}

// callerEnvs returns the tenant-envs the caller may create conversations
// in, ordered: the envs of their memberships, every env of the tenant for a
// tenant-wide one; never a retired env (talkide admin env delete), which
// has no worker any more.
func (s *Server) callerEnvs(r *http.Request, c *auth.Caller) ([]TenantEnv, error) {
	if c.Local() {
		return []TenantEnv{{Tenant: s.cfg.DefaultTenant, Env: s.cfg.DefaultEnv}}, nil
	}
	if len(c.Memberships) == 0 {
		return nil, nil
	}
	envs, err := s.cfg.Store.ListEnvs(r.Context())
	if err != nil {
		return nil, err
	}
	retired := map[TenantEnv]bool{}
	for _, e := range envs {
		if !e.RetiredAt.IsZero() {
			retired[TenantEnv{Tenant: e.Tenant, Env: e.Name}] = true
		}
	}
	var out []TenantEnv
	wide := false
	for _, m := range c.Memberships {
		if m.Env == "" {
			wide = true
			continue
		}
		if te := (TenantEnv{Tenant: m.Tenant, Env: m.Env}); !retired[te] {
			out = append(out, te)
		}
	}
	if wide {
		for _, e := range envs {
			if e.RetiredAt.IsZero() && c.Member(e.Tenant, e.Name) {
				out = append(out, TenantEnv{Tenant: e.Tenant, Env: e.Name})
			}
		}
	}
	slices.SortFunc(out, func(a, b TenantEnv) int {
		return strings.Compare(a.Tenant+"/"+a.Env, b.Tenant+"/"+b.Env)
	})
	return slices.Compact(out), nil
}

// chooseEnv picks a new conversation's tenant-env: the one asked for when
// the caller belongs to it; without one, the control-plane's default when
// the caller belongs to it, else the caller's only one.
func (s *Server) chooseEnv(r *http.Request, c *auth.Caller, tenant, env string) (TenantEnv, error) {
	if (tenant == "") != (env == "") {
		return TenantEnv{}, httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "give both tenant and env, or neither")
	}
	if tenant != "" {
		if err := httpapi.ID("tenant", tenant); err != nil {
			return TenantEnv{}, err
		}
		if err := httpapi.ID("env", env); err != nil {
			return TenantEnv{}, err
		}
	}
	envs, err := s.callerEnvs(r, c)
	if err != nil {
		return TenantEnv{}, err
	}
	if len(envs) == 0 {
		return TenantEnv{}, httpapi.Errorf(http.StatusForbidden, contract.CodeForbidden, "you belong to no tenant-env; ask a tenant's administrator to add you")
	}
	want := TenantEnv{Tenant: tenant, Env: env}
	if tenant == "" {
		want = TenantEnv{Tenant: s.cfg.DefaultTenant, Env: s.cfg.DefaultEnv}
		if !slices.Contains(envs, want) {
			if len(envs) > 1 {
				return TenantEnv{}, httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "choose a tenant and env: you belong to %s", envList(envs))
			}
			want = envs[0]
		}
	}
	if !slices.Contains(envs, want) {
		// The same answer for an env that does not exist and one the
		// caller is not in: a member learns nothing about other tenants.
		return TenantEnv{}, httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound, "no tenant-env %s/%s of yours", want.Tenant, want.Env)
	}
	return want, nil
}

func envList(envs []TenantEnv) string {
	parts := make([]string, len(envs))
	for i, e := range envs {
		parts[i] = e.Tenant + "/" + e.Env
	}
	return strings.Join(parts, ", ")
}

// visibleConversations lists what the caller may see: their own in the
// tenant-envs they still belong to and, for a tenant-admin, the tenant's
// (or the env's); newest first.
func (s *Server) visibleConversations(r *http.Request) ([]store.Conversation, error) {
	c := auth.CallerOf(r)
	own, err := s.cfg.Store.ListConversations(r.Context(), c.UserID)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool)
	var out []store.Conversation
	add := func(cs []store.Conversation) {
		for _, conv := range cs {
			if !seen[conv.ID] && c.CanSee(conv) {
				seen[conv.ID] = true
				out = append(out, conv)
			}
		}
	}
	add(own)
	for _, m := range c.Memberships {
		if m.Role != store.RoleTenantAdmin {
			continue
		}
		cs, err := s.cfg.Store.ListTenantConversations(r.Context(), m.Tenant, m.Env)
		if err != nil {
			return nil, err
		}
		add(cs)
	}
	slices.SortStableFunc(out, func(a, b store.Conversation) int {
		if d := b.LastActivityAt.Compare(a.LastActivityAt); d != 0 {
			return d
		}
		return strings.Compare(b.ID, a.ID)
	})
	return out, nil
}
