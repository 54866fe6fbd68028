package controlplane

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/talkide/platform/internal/auth"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/store"
)

// Reports browsable: what the workers report (tool calls, their usage
// reports, the activity log) and the gateway's usage records, a page at a
// time, newest first. Per conversation to whoever may see it
// (auth.Caller.CanSee), per tenant to its tenant-admins on the browser API
// and to operators on the operator API.

// Page sizes of the browse endpoints.
const (
	defaultBrowsePage = 50
	maxBrowsePage     = 500
	maxCursor         = 512
)

// ReportView is one worker report as the browse endpoints show it.
type ReportView struct {
	Tenant         string               `json:"tenant"`
	Env            string               `json:"env"`
	Kind           string               `json:"kind"`
	ConversationID string               `json:"conversation_id"`
	TurnID         string               `json:"turn_id,omitempty"`
	Time           time.Time            `json:"time"`
	ReceivedAt     time.Time            `json:"received_at"`
	Usage          *contract.Usage      `json:"usage,omitempty"`
	Tool           *contract.ToolReport `json:"tool,omitempty"`
	Activity       string               `json:"activity,omitempty"`
}

// UsageRecordView is one model call that passed the gateway, in a tenant's
// page.
type UsageRecordView struct {
	Tenant         string `json:"tenant"`
	Env            string `json:"env"`
	ConversationID string `json:"conversation_id"`
	User           string `json:"user"`
	UsageView
}

// cursor is a page position as a client carries it: opaque to it.
type cursor struct {
	T int64  `json:"t"`
	E string `json:"e"`
	K string `json:"k"`
}

func encodeCursor(p *store.PagePosition) string {
	if p == nil {
		return ""
	}
	b, _ := json.Marshal(cursor{T: p.Time.UnixMilli(), E: p.Env, K: p.Key})
	return base64.RawURLEncoding.EncodeToString(b)
}

func badQuery(format string, args ...any) error {
	return httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, format, args...)
}

// pageQuery reads limit, before, kind (when kinds) and env (when withEnv)
// from the query string, refusing any other parameter.
func pageQuery(r *http.Request, kinds, withEnv bool) (store.PageQuery, error) {
	allowed := []string{"limit", "before"}
	if kinds {
		allowed = append(allowed, "kind")
	}
	if withEnv {
		allowed = append(allowed, "env")
	}
	if err := onlyParams(r, allowed...); err != nil {
		return store.PageQuery{}, err
	}
	qs := r.URL.Query()
	q := store.PageQuery{Limit: defaultBrowsePage}
	if v := qs.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxBrowsePage {
			return q, badQuery("limit %.16q: want a number from 1 to %d", v, maxBrowsePage)
		}
		q.Limit = n
	}
	if v := qs.Get("before"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		var c cursor
		if err != nil || len(v) > maxCursor || httpapi.DecodeJSON(b, &c) != nil || c.T < 0 {
			return q, badQuery("before: not a position this endpoint gave (the next of a page)")
		}
		q.Before = &store.PagePosition{Time: time.UnixMilli(c.T).UTC(), Env: c.E, Key: c.K}
	}
	if v := qs.Get("kind"); v != "" {
		if v != contract.ReportUsage && v != contract.ReportToolUse && v != contract.ReportActivity && v != contract.ReportTurnEnded {
			return q, badQuery("kind %.32q: want %s, %s, %s or %s", v, contract.ReportToolUse, contract.ReportUsage, contract.ReportActivity, contract.ReportTurnEnded)
		}
		q.Kind = v
	}
	if v := qs.Get("env"); v != "" {
		if err := httpapi.ID("env", v); err != nil {
			return q, err
		}
		q.Env = v
	}
	return q, nil
}

// writePage answers one page of a list: its items under key, and the
// cursor of the next page when there is one.
func writePage[V any](w http.ResponseWriter, key string, items []V, next *store.PagePosition) {
	body := map[string]any{key: items}
	if c := encodeCursor(next); c != "" {
		body["next"] = c
	}
	httpapi.WriteJSON(w, http.StatusOK, body)
}

// views is xs as the API shows them; never nil, so that an empty list is
// [] in JSON, not null.
func views[T, V any](xs []T, view func(T) V) []V {
	out := make([]V, 0, len(xs))
	for _, x := range xs {
		out = append(out, view(x))
	}
	return out
}

func (s *Server) writeReports(w http.ResponseWriter, r *http.Request, q store.PageQuery) error {
	p, err := s.cfg.Store.ListReportPage(r.Context(), q)
	if err != nil {
		return err
	}
	writePage(w, "reports", views(p.Reports, func(sr store.StoredReport) ReportView {
		rep := sr.Report
		return ReportView{Tenant: sr.Tenant, Env: sr.Env, Kind: rep.Kind, ConversationID: rep.ConversationID, TurnID: rep.TurnID,
			Time: rep.Time, ReceivedAt: sr.ReceivedAt, Usage: rep.Usage, Tool: rep.Tool, Activity: rep.Activity}
	}), p.Next)
	return nil
}

func (s *Server) writeUsagePage(w http.ResponseWriter, r *http.Request, q store.PageQuery) error {
	p, err := s.cfg.Store.ListUsagePage(r.Context(), q)
	if err != nil {
		return err
	}
	writePage(w, "usage", views(p.Usage, func(u store.UsageRecord) UsageRecordView {
		return UsageRecordView{Tenant: u.Tenant, Env: u.Env, ConversationID: u.ConversationID, User: u.UserID, UsageView: usageView(u)}
	}), p.Next)
	return nil
}

// handleConversationReports is GET /api/conversations/{id}/reports.
func (s *Server) handleConversationReports(w http.ResponseWriter, r *http.Request) error {
	q, err := pageQuery(r, true, false)
	if err != nil {
		return err
	}
	c, err := s.conversation(r)
	if err != nil {
		return err
	}
	q.Tenant, q.Env, q.ConversationID = c.Tenant, c.Env, c.ID
	return s.writeReports(w, r, q)
}

// tenantQuery is a browse request's page of a tenant the caller
// administers: the whole tenant for a tenant-wide tenant-admin, one env
// (which they must name) for an env's. Any other caller is told the
// tenant does not exist, as for one that does not.
func (s *Server) tenantQuery(r *http.Request, kinds bool) (store.PageQuery, error) {
	tenant := r.PathValue("tenant")
	if err := httpapi.ID("tenant", tenant); err != nil {
		return store.PageQuery{}, err
	}
	q, err := pageQuery(r, kinds, true)
	if err != nil {
		return q, err
	}
	q.Tenant = tenant
	return q, administers(r, tenant, q.Env)
}

// administers refuses a caller who is not a tenant-admin of every env of
// tenant (env "") or of tenant/env, with the answer a tenant that does not
// exist gets, so that nobody learns which tenants exist by asking.
func administers(r *http.Request, tenant, env string) error {
	c := auth.CallerOf(r)
	ok := !c.Local() && ((env == "" && c.TenantAdmin(tenant)) || (env != "" && c.Admin(tenant, env)))
	if !ok {
		return httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound, "no tenant %s that you administer (an env's administrator gives env=)", tenant)
	}
	return nil
}

// handleTenantReports is GET /api/tenants/{tenant}/reports.
func (s *Server) handleTenantReports(w http.ResponseWriter, r *http.Request) error {
	q, err := s.tenantQuery(r, true)
	if err != nil {
		return err
	}
	return s.writeReports(w, r, q)
}

// handleTenantUsage is GET /api/tenants/{tenant}/usage.
func (s *Server) handleTenantUsage(w http.ResponseWriter, r *http.Request) error {
	q, err := s.tenantQuery(r, false)
	if err != nil {
		return err
	}
	return s.writeUsagePage(w, r, q)
}

// operatorTenantQuery is an operator's page of any tenant.
func operatorTenantQuery(r *http.Request, kinds bool) (store.PageQuery, error) {
	tenant := r.PathValue("tenant")
	if err := httpapi.ID("tenant", tenant); err != nil {
		return store.PageQuery{}, err
	}
	q, err := pageQuery(r, kinds, true)
	q.Tenant = tenant
	return q, err
}

func (s *Server) handleAdminTenantReports(w http.ResponseWriter, r *http.Request, _ OperatorToken) error {
	q, err := operatorTenantQuery(r, true)
	if err != nil {
		return err
	}
	return s.writeReports(w, r, q)
}

func (s *Server) handleAdminTenantUsage(w http.ResponseWriter, r *http.Request, _ OperatorToken) error {
	q, err := operatorTenantQuery(r, false)
	if err != nil {
		return err
	}
	return s.writeUsagePage(w, r, q)
}
