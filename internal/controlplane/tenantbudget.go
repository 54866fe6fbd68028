package controlplane

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/store"
)

// A tenant-admin's view of their tenant's budget on the browser API: the
// limits an operator set on the tenant, its envs and its members, where
// each stands, and what the tenant's users spent. It is read-only: limits
// bound what the platform pays for a tenant, so setting them stays with the
// operator (the operator API, talkide admin budget).
//
// A figure is shown only when everything it counts is within what the
// caller administers. A user's own limits count their use in every tenant
// they work in, and a tenant's count every env of it; where that reaches
// beyond the caller's tenant (or env), the limits are listed without their
// figures, so that no administrator learns what a member spends elsewhere.

// TenantBudgetJSON is GET /api/tenants/{tenant}/budget.
type TenantBudgetJSON struct {
	Tenant string `json:"tenant"`
	// Env is the env an env's administrator asked for (env=); absent for
	// the whole tenant.
	Env          string             `json:"env,omitempty"`
	At           time.Time          `json:"at"`
	TenantBudget StatusJSON         `json:"tenant_budget"`
	Envs         []StatusJSON       `json:"envs"`
	Users        []MemberBudgetJSON `json:"users"`
}

// MemberBudgetJSON is a member's own limits, with their role in the
// tenant (the higher one, for a member of the tenant and of one of its
// envs).
type MemberBudgetJSON struct {
	StatusJSON
	Role string `json:"role"`
}

// withhold removes the figures of sj's limits, keeping what the limits
// are, and says why.
func withhold(sj *StatusJSON, why string) {
	sj.Withheld = why
	for i := range sj.Limits {
		l := &sj.Limits[i]
		l.UsedUSD, l.HeldUSD, l.RemainingUSD, l.Used, l.Held, l.Remaining = nil, nil, nil, nil, nil, nil
	}
}

// tenantScope reads the tenant from the path and env from the query, and
// refuses a caller who does not administer them.
func tenantScope(r *http.Request, qs url.Values) (tenant, env string, err error) {
	tenant = r.PathValue("tenant")
	if err := httpapi.ID("tenant", tenant); err != nil {
		return "", "", err
	}
	if env = qs.Get("env"); env != "" {
		if err := httpapi.ID("env", env); err != nil {
			return "", "", err
		}
	}
	return tenant, env, administers(r, tenant, env)
}

func (s *Server) needBudget() error {
	if s.cfg.Budget == nil {
		return httpapi.Errorf(http.StatusServiceUnavailable, contract.CodeUnavailable, "this control-plane keeps no budgets: its budget service is not configured")
	}
	return nil
}

// handleTenantBudget is GET /api/tenants/{tenant}/budget[?env=].
func (s *Server) handleTenantBudget(w http.ResponseWriter, r *http.Request) error {
	if err := onlyParams(r, "env"); err != nil {
		return err
	}
	tenant, env, err := tenantScope(r, r.URL.Query())
	if err != nil {
		return err
	}
	if err := s.needBudget(); err != nil {
		return err
	}
	ctx := r.Context()
	now := s.cfg.Now().UTC()
	status := func(sub budget.Subject) (StatusJSON, []budget.LimitStatus, error) {
		sts, err := s.cfg.Budget.Status(ctx, sub)
		if err != nil {
			return StatusJSON{}, nil, err
		}
		return statusJSON(sub, sts, now), sts, nil
	}
	out := TenantBudgetJSON{Tenant: tenant, Env: env, At: now, Envs: []StatusJSON{}, Users: []MemberBudgetJSON{}}
	if out.TenantBudget, _, err = status(budget.Tenant(tenant)); err != nil {
		return err
	}
	if env != "" && len(out.TenantBudget.Limits) > 0 {
		withhold(&out.TenantBudget, "the tenant's limits count every env of "+tenant+"; you administer "+tenant+"/"+env+" only")
	}

	envs, err := s.cfg.Store.ListEnvs(ctx)
	if err != nil {
		return err
	}
	for _, e := range envs {
		if e.Tenant != tenant || (env != "" && e.Name != env) {
			continue
		}
		sj, _, err := status(budget.Env(tenant, e.Name))
		if err != nil {
			return err
		}
		out.Envs = append(out.Envs, sj)
	}

	roles, err := s.members(ctx, tenant, env)
	if err != nil {
		return err
	}
	users := make([]string, 0, len(roles))
	subjects := make([]budget.Subject, 0, len(roles))
	for u := range roles {
		users = append(users, u)
	}
	slices.Sort(users)
	for _, u := range users {
		subjects = append(subjects, budget.User(u))
	}
	limited := map[string]bool{}
	if len(subjects) > 0 { // Limits of no subject is every limit
		ls, err := s.cfg.Budget.Limits(ctx, subjects...)
		if err != nil {
			return err
		}
		for _, l := range ls {
			limited[l.Subject.ID] = true
		}
	}
	for _, u := range users {
		sub := budget.User(u)
		mj := MemberBudgetJSON{StatusJSON: statusJSON(sub, nil, now), Role: string(roles[u])}
		if limited[u] {
			sj, sts, err := status(sub)
			if err != nil {
				return err
			}
			beyond, err := s.countsBeyond(ctx, u, tenant, env, sts, now)
			if err != nil {
				return err
			}
			if beyond {
				withhold(&sj, "these limits also count "+u+"'s use beyond what you administer")
			}
			mj.StatusJSON = sj
		}
		out.Users = append(out.Users, mj)
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// members returns the members of tenant (of tenant/env when env is
// given: its own members and the tenant's), each with their higher role.
func (s *Server) members(ctx context.Context, tenant, env string) (map[string]store.Role, error) {
	ms, err := s.cfg.Store.ListMemberships(ctx, "", tenant)
	if err != nil {
		return nil, err
	}
	roles := map[string]store.Role{}
	for _, m := range ms {
		if env != "" && m.Env != "" && m.Env != env {
			continue
		}
		if roles[m.UserID] != store.RoleTenantAdmin {
			roles[m.UserID] = m.Role
		}
	}
	return roles, nil
}

// countsBeyond reports whether user's limits (sts) may count use outside
// tenant (outside tenant/env when env is given): when the user belongs to
// a tenant-env outside it, or the ledger holds a call of theirs outside it
// settled within the longest of the limits' windows (a membership ended
// today leaves today's spend in a daily limit).
func (s *Server) countsBeyond(ctx context.Context, user, tenant, env string, sts []budget.LimitStatus, now time.Time) (bool, error) {
	ms, err := s.cfg.Store.ListMemberships(ctx, user, "")
	if err != nil {
		return false, err
	}
	inside := func(t, e string) bool { return t == tenant && (env == "" || e == env) }
	for _, m := range ms {
		// A tenant-wide membership reaches every env of the tenant, so it
		// reaches beyond one env's administrator.
		if !inside(m.Tenant, m.Env) || (env != "" && m.Env == "") {
			return true, nil
		}
	}
	from := now
	for _, st := range sts {
		if w := budget.WindowStart(st.Kind, now); w.Before(from) {
			from = w
		}
	}
	if !from.Before(now) {
		return false, nil
	}
	rep, err := s.cfg.Budget.Report(ctx, budget.ReportQuery{User: user, From: from, By: []budget.Dimension{budget.ByEnv}})
	if err != nil {
		return false, err
	}
	for _, row := range rep.Rows {
		if t, e, _ := strings.Cut(row.Key[0], "/"); !inside(t, e) {
			return true, nil
		}
	}
	return false, nil
}

// handleTenantUsageReport is GET /api/tenants/{tenant}/usage/report: the
// ledger's calls of the tenant (of the env, with env=), grouped as the
// operator API's usage report groups them, by user unless by= says
// otherwise.
func (s *Server) handleTenantUsageReport(w http.ResponseWriter, r *http.Request) error {
	if err := onlyParams(r, "by", "from", "to", "env", "user", "conversation", "model", "order", "limit"); err != nil {
		return err
	}
	qs := r.URL.Query()
	tenant, env, err := tenantScope(r, qs)
	if err != nil {
		return err
	}
	if err := s.needBudget(); err != nil {
		return err
	}
	by := qs.Get("by")
	if by == "" {
		by = string(budget.ByUser)
	}
	return s.writeUsage(w, r, budget.ReportRequest{
		By: by, From: qs.Get("from"), To: qs.Get("to"),
		User: qs.Get("user"), Tenant: tenant, Env: env,
		Conversation: qs.Get("conversation"), Model: qs.Get("model"), Order: qs.Get("order"),
	})
}

// reportLimit reads a usage report's limit= (rows), defaultReportRows
// when absent.
func reportLimit(qs url.Values) (int, error) {
	v := qs.Get("limit")
	if v == "" {
		return defaultReportRows, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxReportRows {
		return 0, httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "limit must be a whole number from 1 to %d", maxReportRows)
	}
	return n, nil
}
