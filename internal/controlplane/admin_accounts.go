package controlplane

import (
	"errors"
	"net/http"
	"time"

	"github.com/talkide/platform/internal/auth"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/store"
)

// The operator API's accounts: memberships (and the users they create) and
// users' API tokens, doing what talkide admin user and admin api-token do
// on the database, through the same functions (auth.AddMember,
// auth.IssueAPIToken, auth.RevokeAPIToken). docs/accounts.md lists them.

// membershipRoutes name a tenant-wide and an env membership.
var membershipRoutes = []string{
	AdminPrefix + "/tenants/{tenant}/members/{user}",
	AdminPrefix + "/tenants/{tenant}/envs/{env}/members/{user}",
}

func (s *Server) registerAdminAccounts(mux *http.ServeMux, h func(httpapi.HandlerFunc) http.Handler, allow map[string][]string) {
	mux.Handle("GET "+AdminPrefix+"/memberships", h(s.operatorOnly(s.handleAdminListMemberships)))
	allow[AdminPrefix+"/memberships"] = []string{http.MethodGet}
	for _, p := range membershipRoutes {
		mux.Handle("PUT "+p, h(s.operatorOnly(s.handleAdminPutMembership)))
		mux.Handle("DELETE "+p, h(s.operatorOnly(s.handleAdminDeleteMembership)))
		allow[p] = []string{http.MethodPut, http.MethodDelete}
	}
	for name, f := range map[string]operatorHandler{"reports": s.handleAdminTenantReports, "usage": s.handleAdminTenantUsage} {
		p := AdminPrefix + "/tenants/{tenant}/" + name
		mux.Handle("GET "+p, h(s.operatorOnly(f)))
		allow[p] = []string{http.MethodGet}
	}
	mux.Handle("GET "+AdminPrefix+"/api-tokens", h(s.operatorOnly(s.handleAdminListTokens)))
	allow[AdminPrefix+"/api-tokens"] = []string{http.MethodGet}
	mux.Handle("POST "+AdminPrefix+"/users/{user}/api-tokens", h(s.operatorOnly(s.handleAdminIssueToken)))
	allow[AdminPrefix+"/users/{user}/api-tokens"] = []string{http.MethodPost}
	mux.Handle("DELETE "+AdminPrefix+"/api-tokens/{id}", h(s.operatorOnly(s.handleAdminRevokeToken)))
	allow[AdminPrefix+"/api-tokens/{id}"] = []string{http.MethodDelete}
}

// PutMembershipRequest is the body of PUT …/members/{user}; both fields
// are optional.
type PutMembershipRequest struct {
	Role string `json:"role,omitempty"` // default member
	Name string `json:"name,omitempty"` // a new user's display name; default the id
}

// IssueTokenRequest is the body of POST /api/admin/users/{user}/api-tokens.
type IssueTokenRequest struct {
	Name string `json:"name,omitempty"`
	// TTL is a Go duration ("720h"); default auth.DefaultAPITokenTTL.
	TTL string `json:"ttl,omitempty"`
}

// APITokenView is an API token's record: never the token.
type APITokenView struct {
	ID         string     `json:"id"`
	User       string     `json:"user"`
	Name       string     `json:"name,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}

func when(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func tokenView(t store.APIToken) APITokenView {
	return APITokenView{ID: t.ID, User: t.UserID, Name: t.Name, CreatedAt: t.CreatedAt,
		ExpiresAt: when(t.ExpiresAt), LastUsedAt: when(t.LastUsedAt), RevokedAt: when(t.RevokedAt)}
}

// membershipOf reads a membership's tenant, env and user from the path.
func membershipOf(r *http.Request) (store.Membership, error) {
	m := store.Membership{Tenant: r.PathValue("tenant"), Env: r.PathValue("env"), UserID: r.PathValue("user")}
	if err := httpapi.ID("tenant", m.Tenant); err != nil {
		return m, err
	}
	if m.Env != "" {
		if err := httpapi.ID("env", m.Env); err != nil {
			return m, err
		}
	}
	return m, httpapi.ID("user id", m.UserID)
}

func (s *Server) handleAdminListMemberships(w http.ResponseWriter, r *http.Request, _ OperatorToken) error {
	if err := onlyParams(r, "tenant", "user"); err != nil {
		return err
	}
	q := r.URL.Query()
	tenant, user := q.Get("tenant"), q.Get("user")
	if tenant == "" && user == "" {
		return httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "give tenant or user (or both)")
	}
	if tenant != "" {
		if err := httpapi.ID("tenant", tenant); err != nil {
			return err
		}
	}
	if user != "" {
		if err := httpapi.ID("user id", user); err != nil {
			return err
		}
	}
	ms, err := s.cfg.Store.ListMemberships(r.Context(), user, tenant)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"memberships": views(ms, membershipView)})
	return nil
}

func (s *Server) handleAdminPutMembership(w http.ResponseWriter, r *http.Request, op OperatorToken) error {
	m, err := membershipOf(r)
	if err != nil {
		return err
	}
	var req PutMembershipRequest
	if err := readOptionalJSON(w, r, maxAdminBody, &req); err != nil {
		return err
	}
	m.Role = store.RoleMember
	if req.Role != "" {
		m.Role = store.Role(req.Role)
	}
	stored, err := auth.AddMember(r.Context(), s.cfg.Store, m, req.Name, s.cfg.Now())
	if errors.Is(err, store.ErrNotFound) {
		return httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound, "%s", err)
	}
	if err != nil {
		var fe *contract.FieldError
		if errors.As(err, &fe) || errors.Is(err, auth.ErrBadRole) {
			return httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "%s", err)
		}
		return err
	}
	s.log.Info("membership set", "operator", op.ID, "user", m.UserID, "tenant", m.Tenant, "env", m.Env, "role", stored.Role)
	httpapi.WriteJSON(w, http.StatusOK, membershipView(stored))
	return nil
}

func (s *Server) handleAdminDeleteMembership(w http.ResponseWriter, r *http.Request, op OperatorToken) error {
	m, err := membershipOf(r)
	if err != nil {
		return err
	}
	if err := s.cfg.Store.DeleteMembership(r.Context(), m.UserID, m.Tenant, m.Env); errors.Is(err, store.ErrNotFound) {
		return httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound, "user %s has no such membership", m.UserID)
	} else if err != nil {
		return err
	}
	s.log.Info("membership removed", "operator", op.ID, "user", m.UserID, "tenant", m.Tenant, "env", m.Env)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) handleAdminListTokens(w http.ResponseWriter, r *http.Request, _ OperatorToken) error {
	if err := onlyParams(r, "user"); err != nil {
		return err
	}
	user := r.URL.Query().Get("user")
	if user != "" {
		if err := httpapi.ID("user id", user); err != nil {
			return err
		}
	}
	ts, err := s.cfg.Store.ListAPITokens(r.Context(), user)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"api_tokens": views(ts, tokenView)})
	return nil
}

func (s *Server) handleAdminIssueToken(w http.ResponseWriter, r *http.Request, op OperatorToken) error {
	user := r.PathValue("user")
	if err := httpapi.ID("user id", user); err != nil {
		return err
	}
	var req IssueTokenRequest
	err := readOptionalJSON(w, r, maxAdminBody, &req)
	if err != nil {
		return err
	}
	var ttl time.Duration
	if req.TTL != "" {
		if ttl, err = time.ParseDuration(req.TTL); err != nil || ttl <= 0 {
			return httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "ttl %.32q: want a positive duration such as 720h", req.TTL)
		}
	}
	token, rec, err := auth.IssueAPIToken(r.Context(), s.cfg.Store, user, req.Name, ttl, s.cfg.Now())
	if errors.Is(err, store.ErrNotFound) {
		return httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound, "no user %s (add them to a tenant first)", user)
	}
	if err != nil {
		var fe *contract.FieldError
		if errors.As(err, &fe) {
			return httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "%s", err)
		}
		return err
	}
	s.log.Info("API token issued", "operator", op.ID, "user", user, "token", rec.ID)
	httpapi.WriteJSON(w, http.StatusCreated, map[string]any{"token": token, "api_token": tokenView(rec)})
	return nil
}

func (s *Server) handleAdminRevokeToken(w http.ResponseWriter, r *http.Request, op OperatorToken) error {
	rec, err := auth.RevokeAPIToken(r.Context(), s.cfg.Store, r.PathValue("id"), s.cfg.Now())
	if errors.Is(err, store.ErrNotFound) {
		return httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound, "no such API token")
	}
	if err != nil {
		return err
	}
	s.log.Info("API token revoked", "operator", op.ID, "user", rec.UserID, "token", rec.ID)
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"api_token": tokenView(rec)})
	return nil
}
