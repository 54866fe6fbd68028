package controlplane_test

import (
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/auth"
	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/store"
)

// seedTenantBudgets adds to the tenancy's users
//
//	gina   tenant-admin of acme/staging only
//	henry  member of acme and of beta
//	ivan   member of acme, who spent in beta/prod today before leaving it
//
// limits on acme, its envs, some users, and on beta and its users (which
// acme's views must never show), and today's ledger.
func seedTenantBudgets(t *testing.T, tn *tenancy) {
	ctx := t.Context()
	for _, m := range []store.Membership{
		{UserID: "gina", Tenant: "acme", Env: "staging", Role: store.RoleTenantAdmin},
		{UserID: "henry", Tenant: "acme", Role: store.RoleMember},
		{UserID: "henry", Tenant: "beta", Role: store.RoleMember},
		{UserID: "ivan", Tenant: "acme", Role: store.RoleMember},
	} {
		must(t, tn.store.PutUser(ctx, store.User{ID: m.UserID, Name: m.UserID, CreatedAt: start}))
		m.CreatedAt = start
		_, err := tn.store.PutMembership(ctx, m)
		must(t, err)
		if tn.tokens[m.UserID] == "" {
			tok, _, err := auth.IssueAPIToken(ctx, tn.store, m.UserID, "test", 0, start)
			must(t, err)
			tn.tokens[m.UserID] = tok
		}
	}
	daily := func(sub budget.Subject, cents int64) budget.Limit {
		return budget.Limit{Subject: sub, Kind: budget.SpendPerDay, Max: cents * int64(budget.Dollar) / 100}
	}
	for _, l := range []budget.Limit{
		daily(budget.Tenant("acme"), 1000),
		daily(budget.Env("acme", "prod"), 400),
		{Subject: budget.Env("acme", "staging"), Kind: budget.RequestsPerMinute, Max: 30},
		daily(budget.User("alice"), 500),
		daily(budget.User("frank"), 200),
		daily(budget.User("henry"), 300),
		daily(budget.User("ivan"), 200),
		daily(budget.User("dave"), 100),
		daily(budget.Tenant("beta"), 700),
		daily(budget.Env("beta", "prod"), 600),
	} {
		must(t, tn.budget.SetLimit(ctx, l))
	}
	now := tn.clock.Now()
	for i, c := range []struct {
		user, tenant, env string
		cents             int64
	}{
		{"alice", "acme", "prod", 100},
		{"bob", "acme", "staging", 50},
		{"frank", "acme", "staging", 25},
		{"henry", "beta", "prod", 75},
		{"henry", "acme", "prod", 10},
		{"ivan", "beta", "prod", 30},
		{"dave", "beta", "prod", 200},
	} {
		_, err := tn.store.SettleBudget(ctx, budget.Entry{ID: "call" + string(rune('a'+i)), Tenant: c.tenant, Env: c.env, User: c.user, Conversation: "c1",
			Usage: budget.Usage{Model: "claude-sonnet-4-6", InputTokens: 1000 + int64(i), OutputTokens: 10},
			Cost:  budget.Money(c.cents) * budget.Dollar / 100, Status: 200, StartedAt: now, SettledAt: now})
		must(t, err)
	}
}

// figures renders a status's spending figures as "used/remaining", or
// "withheld" when the view leaves them out.
func figures(t *testing.T, sj controlplane.StatusJSON) string {
	t.Helper()
	var parts []string
	for _, l := range sj.Limits {
		switch {
		case l.UsedUSD != nil:
			parts = append(parts, string(l.Kind)+" "+*l.UsedUSD+"/"+*l.RemainingUSD)
		case l.Used != nil:
			parts = append(parts, string(l.Kind)+" "+itoa64(*l.Used)+"/"+itoa64(*l.Remaining))
		default:
			if sj.Withheld == "" {
				t.Errorf("%s %s: a limit without figures, and no reason why", sj.Scope, sj.Subject)
			}
			parts = append(parts, string(l.Kind)+" withheld")
		}
	}
	return strings.Join(parts, ", ")
}

// TestTenantBudget: a tenant-admin of acme sees acme's limits, its envs'
// and its members', with what each used and has left; a member's limits
// that count use outside acme (a member of beta too, or one who spent in
// beta today) are listed without their figures; beta's limits and users
// never appear. An env's administrator sees that env and its members, and
// the tenant's limits without figures.
func TestTenantBudget(t *testing.T) {
	tn := newTenancy(t, nil)
	seedTenantBudgets(t, tn)

	get := func(user, path string) controlplane.TenantBudgetJSON {
		t.Helper()
		resp, body := tn.as(user, http.MethodGet, path, "", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s GET %s: %d %s", user, path, resp.StatusCode, body)
		}
		if strings.Contains(string(body), "beta") || strings.Contains(string(body), "dave") {
			t.Errorf("%s GET %s shows another tenant's: %s", user, path, body)
		}
		var got controlplane.TenantBudgetJSON
		decodeJSON(t, body, &got)
		return got
	}
	users := func(v controlplane.TenantBudgetJSON) map[string]string {
		out := map[string]string{}
		for _, u := range v.Users {
			out[u.Subject+" "+u.Role] = figures(t, u.StatusJSON)
		}
		return out
	}

	carol := get("carol", "/api/tenants/acme/budget")
	if got := figures(t, carol.TenantBudget); got != "spend_per_day 1.85/8.15" {
		t.Errorf("acme's limits to carol: %s", got)
	}
	var envs []string
	for _, e := range carol.Envs {
		envs = append(envs, e.Subject+": "+figures(t, e))
	}
	if len(envs) != 2 || envs[0] != "acme/prod: spend_per_day 1.10/2.90" || !strings.HasPrefix(envs[1], "acme/staging: requests_per_minute ") {
		t.Errorf("acme's envs to carol: %q", envs)
	}
	wantUsers := map[string]string{
		"alice member":       "spend_per_day 1.00/4.00",
		"bob member":         "",
		"carol tenant-admin": "",
		"frank member":       "spend_per_day 0.25/1.75",
		"gina tenant-admin":  "",
		"henry member":       "spend_per_day withheld",
		"ivan member":        "spend_per_day withheld",
	}
	if got := users(carol); !maps.Equal(got, wantUsers) {
		t.Errorf("acme's members to carol:\n got %v\nwant %v", got, wantUsers)
	}
	for _, u := range carol.Users {
		if u.Subject == "henry" && (len(u.Limits) != 1 || *u.Limits[0].MaxUSD != "3.00" || u.Limits[0].Window != "day" || !strings.Contains(u.Withheld, "beyond")) {
			t.Errorf("henry's limit, withheld: %+v", u)
		}
	}

	gina := get("gina", "/api/tenants/acme/budget?env=staging")
	if got := figures(t, gina.TenantBudget); gina.Env != "staging" || got != "spend_per_day withheld" || *gina.TenantBudget.Limits[0].MaxUSD != "10.00" {
		t.Errorf("acme's limits to gina: %s (%+v)", got, gina.TenantBudget)
	}
	if len(gina.Envs) != 1 || gina.Envs[0].Subject != "acme/staging" {
		t.Errorf("acme's envs to gina: %+v", gina.Envs)
	}
	// Members of every env reach beyond staging; frank works in staging
	// alone.
	wantUsers["alice member"] = "spend_per_day withheld"
	if got := users(gina); !maps.Equal(got, wantUsers) {
		t.Errorf("acme/staging's members to gina:\n got %v\nwant %v", got, wantUsers)
	}

	// Ivan's spend in beta leaves the window tomorrow: then his daily
	// limit counts acme alone and its figures show.
	tn.clock.Advance(24 * time.Hour)
	carol = get("carol", "/api/tenants/acme/budget")
	if got := users(carol)["ivan member"]; got != "spend_per_day 0.00/2.00" {
		t.Errorf("ivan's limit the next day: %s", got)
	}
}

// TestTenantUsageReport: a tenant's usage per user over a period, from
// the ledger: only what was spent in the tenant (henry's beta calls are
// not acme's), one env's for its administrator.
func TestTenantUsageReport(t *testing.T) {
	tn := newTenancy(t, nil)
	seedTenantBudgets(t, tn)
	report := func(user, path string) map[string]string {
		t.Helper()
		resp, body := tn.as(user, http.MethodGet, path, "", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s GET %s: %d %s", user, path, resp.StatusCode, body)
		}
		var rep controlplane.UsageJSON
		decodeJSON(t, body, &rep)
		out := map[string]string{}
		for _, row := range rep.Rows {
			var key []string
			for _, d := range rep.By {
				key = append(key, row.Key[string(d)])
			}
			out[strings.Join(key, " ")] = row.CostUSD + " " + itoa64(row.Requests) + " calls"
		}
		out["total"] = rep.Total.CostUSD
		return out
	}
	want := map[string]string{"alice": "1.00 1 calls", "bob": "0.50 1 calls", "frank": "0.25 1 calls", "henry": "0.10 1 calls", "total": "1.85"}
	if got := report("carol", "/api/tenants/acme/usage/report"); !maps.Equal(got, want) {
		t.Errorf("acme's usage by user:\n got %v\nwant %v", got, want)
	}
	want = map[string]string{"bob": "0.50 1 calls", "frank": "0.25 1 calls", "total": "0.75"}
	if got := report("gina", "/api/tenants/acme/usage/report?env=staging&from=2026-11-30&to=2026-11-30"); !maps.Equal(got, want) {
		t.Errorf("acme/staging's usage by user:\n got %v\nwant %v", got, want)
	}
	want = map[string]string{"acme/prod": "1.10 2 calls", "acme/staging": "0.75 2 calls", "total": "1.85"}
	if got := report("carol", "/api/tenants/acme/usage/report?by=env"); !maps.Equal(got, want) {
		t.Errorf("acme's usage by env:\n got %v\nwant %v", got, want)
	}
	// A filter on a user of another tenant finds nothing of theirs.
	want = map[string]string{"total": "0.00"}
	if got := report("carol", "/api/tenants/acme/usage/report?user=dave"); !maps.Equal(got, want) {
		t.Errorf("dave's usage in acme: %v", got)
	}
	// Before the calls: nothing.
	if got := report("erin", "/api/tenants/beta/usage/report?to=2026-11-29"); got["total"] != "0.00" || len(got) != 1 {
		t.Errorf("beta's usage before the calls: %v", got)
	}
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

// TestTenantBudgetRefused: every caller who does not administer what they
// ask for gets the 404 of a tenant that does not exist, on both
// endpoints; bad input is a clear 400 and unknown methods 405.
func TestTenantBudgetRefused(t *testing.T) {
	tn := newTenancy(t, nil)
	seedTenantBudgets(t, tn)
	paths := map[string]string{
		"acme":                "/api/tenants/acme/budget",
		"acme/staging":        "/api/tenants/acme/budget?env=staging",
		"acme/prod":           "/api/tenants/acme/budget?env=prod",
		"beta":                "/api/tenants/beta/budget",
		"nope":                "/api/tenants/nope/budget",
		"acme report":         "/api/tenants/acme/usage/report",
		"acme/staging report": "/api/tenants/acme/usage/report?env=staging&by=user,day",
		"acme/prod report":    "/api/tenants/acme/usage/report?env=prod",
		"beta report":         "/api/tenants/beta/usage/report?by=model",
		"nope report":         "/api/tenants/nope/usage/report",
	}
	allowed := map[string][]string{
		"carol": {"acme", "acme/staging", "acme/prod", "acme report", "acme/staging report", "acme/prod report"},
		"erin":  {"beta", "beta report"},
		"gina":  {"acme/staging", "acme/staging report"},
	}
	// Members (alice of acme, frank of one env of it, henry of both
	// tenants, dave of beta), the other tenant's admin, an env's admin
	// asking for the tenant or another env: 404 alike.
	tn.reach([]string{"alice", "bob", "frank", "henry", "dave", "carol", "erin", "gina"}, paths, allowed, func(user, p string, resp *http.Response, body []byte) {
		if code := wantError(t, resp, body, http.StatusNotFound, contract.CodeNotFound); strings.Contains(string(body), "limit") {
			t.Errorf("%s GET %s: the refusal tells of limits (%s): %s", user, p, code, body)
		}
	})

	// Another user's API token speaks for that user, whatever the request
	// says of who it is for: bob's token is bob, who administers nothing.
	resp, body := tn.as("bob", http.MethodGet, "/api/tenants/acme/budget", "", http.Header{"X-Forwarded-User": {"carol"}})
	wantError(t, resp, body, http.StatusNotFound, contract.CodeNotFound)
	// A revoked token of carol's, and none: 401, before any tenant.
	resp, body = tn.as("", http.MethodGet, "/api/tenants/acme/budget", "", nil)
	wantError(t, resp, body, http.StatusUnauthorized, contract.CodeUnauthorized)
	tok, rec, err := auth.IssueAPIToken(t.Context(), tn.store, "carol", "revoked", 0, start)
	must(t, err)
	_, err = auth.RevokeAPIToken(t.Context(), tn.store, rec.ID, start)
	must(t, err)
	tn.tokens["carol-revoked"] = tok
	resp, body = tn.as("carol-revoked", http.MethodGet, "/api/tenants/acme/budget", "", nil)
	wantError(t, resp, body, http.StatusUnauthorized, contract.CodeUnauthorized)
	// A tenant-admin made a member is refused at their next request.
	_, err = tn.store.PutMembership(t.Context(), store.Membership{UserID: "erin", Tenant: "beta", Role: store.RoleMember, CreatedAt: start})
	must(t, err)
	resp, body = tn.as("erin", http.MethodGet, "/api/tenants/beta/budget", "", nil)
	wantError(t, resp, body, http.StatusNotFound, contract.CodeNotFound)

	for _, p := range []string{
		"/api/tenants/acme/budget?env=..",
		"/api/tenants/acme/budget?env=" + strings.Repeat("x", 200),
		"/api/tenants/a%20b/budget",
		"/api/tenants/acme/usage/report?env=a.b",
		"/api/tenants/acme/usage/report?user=../x",
	} {
		resp, body := tn.as("carol", http.MethodGet, p, "", nil)
		wantError(t, resp, body, http.StatusBadRequest, contract.CodeInvalidID)
	}
	for _, p := range []string{
		"/api/tenants/acme/budget?user=alice",
		"/api/tenants/acme/budget?env=prod&env=staging",
		"/api/tenants/acme/budget?%zz",
		"/api/tenants/acme/usage/report?by=colour",
		"/api/tenants/acme/usage/report?by=user,user",
		"/api/tenants/acme/usage/report?from=yesterday",
		"/api/tenants/acme/usage/report?from=2026-12-01&to=2026-11-01",
		"/api/tenants/acme/usage/report?limit=0",
		"/api/tenants/acme/usage/report?limit=10001",
		"/api/tenants/acme/usage/report?order=random",
		"/api/tenants/acme/usage/report?tenant=beta",
		"/api/tenants/acme/usage/report?model=" + strings.Repeat("m", 300),
		"/api/tenants/acme/usage/report?" + strings.Repeat("a", 2100),
	} {
		resp, body := tn.as("carol", http.MethodGet, p, "", nil)
		wantError(t, resp, body, http.StatusBadRequest, contract.CodeBadRequest)
	}
	for _, p := range []string{"/api/tenants/acme/budget", "/api/tenants/acme/usage/report"} {
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
			resp, body := tn.as("carol", m, p, `{"max_usd":"1"}`, nil)
			wantError(t, resp, body, http.StatusMethodNotAllowed, contract.CodeMethodNotAllowed)
		}
	}
	// The limits are as they were: nothing a tenant-admin sends sets one.
	ls, err := tn.budget.Limits(t.Context(), budget.Tenant("acme"))
	must(t, err)
	if len(ls) != 1 || ls[0].Max != 10*int64(budget.Dollar) {
		t.Errorf("acme's limits after the refused requests: %+v", ls)
	}

	// Without a budget service: 503 to an administrator, 404 to others.
	nb := newTenancyBudget(t, nil, false)
	resp, body = nb.as("carol", http.MethodGet, "/api/tenants/acme/budget", "", nil)
	wantError(t, resp, body, http.StatusServiceUnavailable, contract.CodeUnavailable)
	resp, body = nb.as("carol", http.MethodGet, "/api/tenants/acme/usage/report", "", nil)
	wantError(t, resp, body, http.StatusServiceUnavailable, contract.CodeUnavailable)
	resp, body = nb.as("alice", http.MethodGet, "/api/tenants/acme/budget", "", nil)
	wantError(t, resp, body, http.StatusNotFound, contract.CodeNotFound)
}
