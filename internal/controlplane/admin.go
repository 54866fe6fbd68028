package controlplane

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
)

// The operator API: budget limits, where a subject stands against them, and
// usage reports, for automation. Every request needs an operator token
// (Authorization: Bearer tko_…); docs/budgets.md describes the endpoints.

// AdminPrefix is where the operator API lives.
const AdminPrefix = "/api/admin"

// Bounds of the operator API's input.
const (
	maxAdminBody      = 4 << 10
	defaultReportRows = 1000
	maxReportRows     = 10000
)

// operatorHandler is a handler of the operator API, given who called.
type operatorHandler func(w http.ResponseWriter, r *http.Request, op OperatorToken) error

// operator authenticates a request of the operator API. Every failure is
// the same 401, and neither the answer nor the log holds the credential.
func (s *Server) operator(f operatorHandler) httpapi.HandlerFunc {
	return s.operatorOnly(func(w http.ResponseWriter, r *http.Request, op OperatorToken) error {
		if s.cfg.Budget == nil {
			return httpapi.Errorf(http.StatusServiceUnavailable, contract.CodeUnavailable, "budgets are not configured on this control-plane")
		}
		return f(w, r, op)
	})
}

// operatorOnly authenticates a request of the operator API that does not
// need budgets (the accounts endpoints).
func (s *Server) operatorOnly(f operatorHandler) httpapi.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if s.cfg.Operators == nil {
			return httpapi.Errorf(http.StatusServiceUnavailable, contract.CodeUnavailable, "the operator API is not configured")
		}
		scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		var (
			op  OperatorToken
			err = errors.New("no bearer token")
		)
		if ok && strings.EqualFold(scheme, "Bearer") {
			op, err = s.cfg.Operators.Verify(strings.TrimSpace(tok))
		}
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="talkide-operator"`)
			return &httpapi.Error{Status: http.StatusUnauthorized, Code: contract.CodeUnauthorized,
				Msg: "a valid operator token is required (Authorization: Bearer tko_…)", Err: err}
		}
		return f(w, r, op)
	}
}

// subjectRoutes are the prefixes under which a subject's limits and status
// are; their wildcards name the subject.
var subjectRoutes = []string{
	AdminPrefix + "/users/{user}",
	AdminPrefix + "/tenants/{tenant}",
	AdminPrefix + "/tenants/{tenant}/envs/{env}",
}

// registerAdmin adds the operator API to mux.
func (s *Server) registerAdmin(mux *http.ServeMux, h func(httpapi.HandlerFunc) http.Handler) {
	allow := map[string][]string{AdminPrefix + "/limits": {http.MethodGet}, AdminPrefix + "/usage": {http.MethodGet}}
	mux.Handle("GET "+AdminPrefix+"/limits", h(s.operator(s.handleAllLimits)))
	mux.Handle("GET "+AdminPrefix+"/usage", h(s.operator(s.handleUsage)))
	for _, p := range subjectRoutes {
		mux.Handle("GET "+p+"/limits", h(s.operator(s.handleLimits)))
		mux.Handle("PUT "+p+"/limits/{kind}", h(s.operator(s.handleSetLimit)))
		mux.Handle("DELETE "+p+"/limits/{kind}", h(s.operator(s.handleDeleteLimit)))
		mux.Handle("GET "+p+"/budget", h(s.operator(s.handleStatus)))
		allow[p+"/limits"] = []string{http.MethodGet}
		allow[p+"/limits/{kind}"] = []string{http.MethodPut, http.MethodDelete}
		allow[p+"/budget"] = []string{http.MethodGet}
	}
	s.registerAdminAccounts(mux, h, allow)
	for path, methods := range allow {
		mux.Handle(path, httpapi.MethodNotAllowed(s.log, methods...))
	}
	// Anything else under the prefix: 404, to an operator only. The prefix
	// itself too, rather than ServeMux's redirect to AdminPrefix+"/".
	other := h(s.operator(func(http.ResponseWriter, *http.Request, OperatorToken) error {
		return httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound, "no such endpoint of the operator API")
	}))
	mux.Handle(AdminPrefix+"/", other)
	mux.Handle(AdminPrefix, other)
}

// subjectOf reads the subject from the path's wildcards.
func subjectOf(r *http.Request) (budget.Subject, error) {
	user, tenant, env := r.PathValue("user"), r.PathValue("tenant"), r.PathValue("env")
	switch {
	case user != "":
		if err := httpapi.ID("user id", user); err != nil {
			return budget.Subject{}, err
		}
		return budget.User(user), nil
	case env != "":
		if err := httpapi.ID("tenant", tenant); err != nil {
			return budget.Subject{}, err
		}
		if err := httpapi.ID("env", env); err != nil {
			return budget.Subject{}, err
		}
		return budget.Env(tenant, env), nil
	default:
		if err := httpapi.ID("tenant", tenant); err != nil {
			return budget.Subject{}, err
		}
		return budget.Tenant(tenant), nil
	}
}

// paramlessSubject is subjectOf for an endpoint that takes no query
// parameters.
func paramlessSubject(r *http.Request) (budget.Subject, error) {
	if err := onlyParams(r); err != nil {
		return budget.Subject{}, err
	}
	return subjectOf(r)
}

// kindOf reads the kind from the path: a kind's name or a short alias
// (daily, rpm, …).
func kindOf(r *http.Request) (budget.Kind, error) {
	return budget.ParseKind(r.PathValue("kind"))
}

// usd renders money as a decimal number of dollars, exactly: "5.00",
// "0.017385".
func usd(m budget.Money) string { return strings.Replace(m.String(), "$", "", 1) }

// LimitJSON is a limit in the operator API.
type LimitJSON struct {
	Scope   budget.Scope `json:"scope"`
	Subject string       `json:"subject"` // a user id, a tenant, or "tenant/env"
	Kind    budget.Kind  `json:"kind"`
	// MaxUSD is a spending limit's maximum in dollars, an exact decimal;
	// Max the maximum of the other kinds, a count. Exactly one is set.
	MaxUSD    *string   `json:"max_usd,omitempty"`
	Max       *int64    `json:"max,omitempty"`
	Hard      bool      `json:"hard"`
	UpdatedAt time.Time `json:"updated_at"`
}

func limitJSON(l budget.Limit) LimitJSON {
	j := LimitJSON{Scope: l.Subject.Scope, Subject: l.Subject.ID, Kind: l.Kind, Hard: l.Hard, UpdatedAt: l.UpdatedAt.UTC()}
	if l.Kind.Spend() {
		v := usd(budget.Money(l.Max))
		j.MaxUSD = &v
	} else {
		v := l.Max
		j.Max = &v
	}
	return j
}

// LimitsJSON is a list of limits.
type LimitsJSON struct {
	Limits []LimitJSON `json:"limits"`
}

func limitsJSON(ls []budget.Limit) LimitsJSON {
	out := LimitsJSON{Limits: make([]LimitJSON, 0, len(ls))}
	for _, l := range ls {
		out.Limits = append(out.Limits, limitJSON(l))
	}
	return out
}

// handleAllLimits lists every limit, or those of one scope (?scope=user).
func (s *Server) handleAllLimits(w http.ResponseWriter, r *http.Request, _ OperatorToken) error {
	if err := onlyParams(r, "scope"); err != nil {
		return err
	}
	scope := budget.Scope(r.URL.Query().Get("scope"))
	if scope != "" && scope != budget.ScopeUser && scope != budget.ScopeTenant && scope != budget.ScopeEnv {
		return httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "scope must be user, tenant or env")
	}
	ls, err := s.cfg.Budget.Limits(r.Context())
	if err != nil {
		return err
	}
	if scope != "" {
		ls = slices.DeleteFunc(ls, func(l budget.Limit) bool { return l.Subject.Scope != scope })
	}
	httpapi.WriteJSON(w, http.StatusOK, limitsJSON(ls))
	return nil
}

func (s *Server) handleLimits(w http.ResponseWriter, r *http.Request, _ OperatorToken) error {
	sub, err := paramlessSubject(r)
	if err != nil {
		return err
	}
	ls, err := s.cfg.Budget.Limits(r.Context(), sub)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, limitsJSON(ls))
	return nil
}

// SetLimitRequest is the body of PUT …/limits/{kind}: max_usd for a
// spending limit (dollars: a decimal string such as "5.00", or a JSON
// number, read exactly), max for the other kinds.
type SetLimitRequest struct {
	MaxUSD json.RawMessage `json:"max_usd,omitempty"`
	Max    *int64          `json:"max,omitempty"`
	Hard   bool            `json:"hard,omitempty"`
}

func (s *Server) handleSetLimit(w http.ResponseWriter, r *http.Request, op OperatorToken) error {
	if err := onlyParams(r); err != nil {
		return err
	}
	body, err := httpapi.ReadBody(w, r, maxAdminBody)
	if err != nil {
		return err
	}
	sub, err := subjectOf(r)
	if err != nil {
		return err
	}
	kind, err := kindOf(r)
	if err != nil {
		return err
	}
	var req SetLimitRequest
	if err := httpapi.DecodeJSON(body, &req); err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, format, args...)
	}
	var max int64
	switch {
	case kind.Spend() && req.Max != nil, kind.Spend() && req.MaxUSD == nil:
		return bad("%s is a spending limit: give its maximum in dollars as max_usd, e.g. {\"max_usd\": \"5.00\"}", kind)
	case !kind.Spend() && req.MaxUSD != nil, !kind.Spend() && req.Max == nil:
		return bad("%s is not a spending limit: give its maximum as a whole number in max, e.g. {\"max\": 60}", kind)
	case kind.Spend():
		v := string(bytes.TrimSpace(req.MaxUSD))
		if s, err := strconv.Unquote(v); err == nil {
			v = s
		}
		m, err := budget.ParseMoney(v)
		if err != nil {
			return bad("max_usd: %v", err)
		}
		max = int64(m)
	default:
		max = *req.Max
	}
	l := budget.Limit{Subject: sub, Kind: kind, Max: max, Hard: req.Hard}
	if err := s.cfg.Budget.SetLimit(r.Context(), l); err != nil {
		return err // a *contract.FieldError is answered 400
	}
	ls, err := s.cfg.Budget.Limits(r.Context(), sub)
	if err != nil {
		return err
	}
	for _, stored := range ls {
		if stored.Kind == kind {
			l = stored
		}
	}
	j := limitJSON(l)
	s.log.InfoContext(r.Context(), "operator: limit set", "operator", op.ID, "scope", sub.Scope, "subject", sub.ID,
		"kind", kind, "max", limitAmount(l), "hard", l.Hard)
	httpapi.WriteJSON(w, http.StatusOK, j)
	return nil
}

// limitAmount renders a limit's maximum for the log.
func limitAmount(l budget.Limit) string {
	if l.Kind.Spend() {
		return budget.Money(l.Max).String()
	}
	return strconv.FormatInt(l.Max, 10)
}

func (s *Server) handleDeleteLimit(w http.ResponseWriter, r *http.Request, op OperatorToken) error {
	sub, err := paramlessSubject(r)
	if err != nil {
		return err
	}
	kind, err := kindOf(r)
	if err != nil {
		return err
	}
	if err := s.cfg.Budget.DeleteLimit(r.Context(), sub, kind); err != nil {
		return err
	}
	s.log.InfoContext(r.Context(), "operator: limit deleted", "operator", op.ID, "scope", sub.Scope, "subject", sub.ID, "kind", kind)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// LimitStatusJSON is a limit and where its subject stands against it. Money
// is in dollars (the _usd fields, exact decimals) for spending limits,
// counts otherwise, as in LimitJSON.
type LimitStatusJSON struct {
	LimitJSON
	UsedUSD      *string `json:"used_usd,omitempty"`
	HeldUSD      *string `json:"held_usd,omitempty"`
	RemainingUSD *string `json:"remaining_usd,omitempty"`
	Used         *int64  `json:"used,omitempty"`
	Held         *int64  `json:"held,omitempty"`
	Remaining    *int64  `json:"remaining,omitempty"`
	// Window says what Used counts: "day", "week", "month" (UTC calendar
	// periods), "rolling_5h", "minute" or "now" (calls in flight).
	Window string `json:"window"`
	// ResetsAt is the end of the current calendar period; absent for the
	// rolling window and the concurrency limit.
	ResetsAt *time.Time `json:"resets_at,omitempty"`
}

// StatusJSON is a subject's budget now.
type StatusJSON struct {
	Scope   budget.Scope      `json:"scope"`
	Subject string            `json:"subject"`
	At      time.Time         `json:"at"`
	Limits  []LimitStatusJSON `json:"limits"`
	// Withheld, in a tenant-admin's view, says why the limits are shown
	// without their figures (used, held, remaining): they count use beyond
	// what the caller administers.
	Withheld string `json:"withheld,omitempty"`
}

// window names the span a limit of kind k counts.
func window(k budget.Kind) string {
	switch k {
	case budget.SpendPerDay, budget.TokensPerDay:
		return "day"
	case budget.SpendPerWeek:
		return "week"
	case budget.SpendPerMonth:
		return "month"
	case budget.SpendPer5h:
		return "rolling_5h"
	case budget.RequestsPerMinute:
		return "minute"
	}
	return "now"
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request, _ OperatorToken) error {
	sub, err := paramlessSubject(r)
	if err != nil {
		return err
	}
	sts, err := s.cfg.Budget.Status(r.Context(), sub)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, statusJSON(sub, sts, s.cfg.Now().UTC()))
	return nil
}

// statusJSON is where sub stands at at: the operator API's answer, and the
// browser's for the caller's own budget.
func statusJSON(sub budget.Subject, sts []budget.LimitStatus, at time.Time) StatusJSON {
	out := StatusJSON{Scope: sub.Scope, Subject: sub.ID, At: at, Limits: make([]LimitStatusJSON, 0, len(sts))}
	for _, st := range sts {
		j := LimitStatusJSON{LimitJSON: limitJSON(st.Limit), Window: window(st.Kind)}
		used, held, rem := st.Used, st.Held, st.Remaining()
		if st.Kind.Spend() {
			u, h, r := usd(budget.Money(used)), usd(budget.Money(held)), usd(budget.Money(rem))
			j.UsedUSD, j.HeldUSD, j.RemainingUSD = &u, &h, &r
		} else {
			j.Used, j.Held, j.Remaining = &used, &held, &rem
		}
		if !st.Resets.IsZero() {
			t := st.Resets.UTC()
			j.ResetsAt = &t
		}
		out.Limits = append(out.Limits, j)
	}
	return out
}

// TotalsJSON is budget.Totals in the operator API.
type TotalsJSON struct {
	Requests           int64  `json:"requests"`
	Failed             int64  `json:"failed"`
	Estimated          int64  `json:"estimated"`
	InputTokens        int64  `json:"input_tokens"`
	CacheWrite5mTokens int64  `json:"cache_write_5m_tokens"`
	CacheWrite1hTokens int64  `json:"cache_write_1h_tokens"`
	CacheReadTokens    int64  `json:"cache_read_tokens"`
	OutputTokens       int64  `json:"output_tokens"`
	WebSearchRequests  int64  `json:"web_search_requests"`
	CostUSD            string `json:"cost_usd"`
}

func totalsJSON(t budget.Totals) TotalsJSON {
	return TotalsJSON{
		Requests: t.Requests, Failed: t.Failed, Estimated: t.Estimated,
		InputTokens: t.InputTokens, CacheWrite5mTokens: t.CacheWrite5mTokens, CacheWrite1hTokens: t.CacheWrite1hTokens,
		CacheReadTokens: t.CacheReadTokens, OutputTokens: t.OutputTokens, WebSearchRequests: t.WebSearchRequests,
		CostUSD: usd(t.Cost),
	}
}

// UsageRowJSON is one group of a usage report: Key maps each dimension
// grouped by to its value.
type UsageRowJSON struct {
	Key map[string]string `json:"key"`
	TotalsJSON
}

// UsageJSON is a usage report.
type UsageJSON struct {
	By      []budget.Dimension `json:"by"`
	From    time.Time          `json:"from"`
	To      *time.Time         `json:"to,omitempty"` // absent: up to now
	Order   budget.ReportOrder `json:"order"`
	Rows    []UsageRowJSON     `json:"rows"`
	Total   TotalsJSON         `json:"total"`
	Omitted int                `json:"omitted"` // rows past limit, which Total still counts
}

// handleUsage reports usage from the ledger:
// ?by=user[,day…]&from=&to=&user=&tenant=&env=&conversation=&model=&order=cost|key&limit=N
func (s *Server) handleUsage(w http.ResponseWriter, r *http.Request, _ OperatorToken) error {
	if err := onlyParams(r, "by", "from", "to", "user", "tenant", "env", "conversation", "model", "order", "limit"); err != nil {
		return err
	}
	qs := r.URL.Query()
	return s.writeUsage(w, r, budget.ReportRequest{
		By: qs.Get("by"), From: qs.Get("from"), To: qs.Get("to"),
		User: qs.Get("user"), Tenant: qs.Get("tenant"), Env: qs.Get("env"),
		Conversation: qs.Get("conversation"), Model: qs.Get("model"), Order: qs.Get("order"),
	})
}

// writeUsage answers a usage report of the ledger for req, with the
// request's limit= of rows.
func (s *Server) writeUsage(w http.ResponseWriter, r *http.Request, req budget.ReportRequest) error {
	q, err := req.Query(s.cfg.Now())
	if err != nil {
		return err
	}
	if q.MaxRows, err = reportLimit(r.URL.Query()); err != nil {
		return err
	}
	rep, err := s.cfg.Budget.Report(r.Context(), q)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, usageJSON(rep))
	return nil
}

func usageJSON(rep *budget.Report) UsageJSON {
	q := rep.Query
	out := UsageJSON{By: q.By, From: q.From.UTC(), Order: q.Order, Rows: make([]UsageRowJSON, 0, len(rep.Rows)),
		Total: totalsJSON(rep.Total), Omitted: rep.Omitted}
	if out.By == nil {
		out.By = []budget.Dimension{}
	}
	if !q.To.IsZero() {
		t := q.To.UTC()
		out.To = &t
	}
	for _, row := range rep.Rows {
		key := make(map[string]string, len(q.By))
		for i, d := range q.By {
			key[string(d)] = row.Key[i]
		}
		out.Rows = append(out.Rows, UsageRowJSON{Key: key, TotalsJSON: totalsJSON(row.Totals)})
	}
	return out
}

// onlyParams refuses query parameters other than allowed, and repeated
// ones, so that a misspelt filter is reported rather than ignored.
func onlyParams(r *http.Request, allowed ...string) error {
	qs, err := parseQuery(r)
	if err != nil {
		return err
	}
	for k, vs := range qs {
		if !slices.Contains(allowed, k) {
			if len(allowed) == 0 {
				return httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "this endpoint takes no query parameters (got %q)", k)
			}
			return httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "unknown query parameter %q: this endpoint takes %s", k, strings.Join(allowed, ", "))
		}
		if len(vs) > 1 {
			return httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "query parameter %q is given %d times", k, len(vs))
		}
	}
	return nil
}

func parseQuery(r *http.Request) (url.Values, error) {
	if len(r.URL.RawQuery) > 2048 {
		return nil, httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "the query string is longer than 2048 bytes")
	}
	qs, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "the query string is malformed")
	}
	return qs, nil
}
