package controlplane_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/fakeclock"
	"github.com/talkide/platform/internal/roundtrip"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/postgres"
	"github.com/talkide/platform/internal/store/postgres/pgtest"
	"github.com/talkide/platform/internal/store/sqlite"
	"github.com/talkide/platform/internal/store/storetest"
	"github.com/talkide/platform/internal/syncbuf"
	"github.com/talkide/platform/internal/trust"
)

// budgetStore is a control-plane store that keeps budgets: *sqlite.Store or
// *postgres.Store.
type budgetStore interface {
	store.Store
	budget.Store
}

// adminHarness is a control-plane with budgets and the operator API over a
// real store, on loopback.
type adminHarness struct {
	t      *testing.T
	url    string
	svc    *budget.Service
	store  budgetStore
	clock  *fakeclock.Clock
	tokens string // the operator token file
	token  string // an operator token in it
	logs   *syncbuf.Buffer
}

func openSQLite(t *testing.T) budgetStore {
	t.Helper()
	st := storetest.Open(t, sqlite.Open, filepath.Join(t.TempDir(), "cp.db"))
	return st
}

func newAdminHarness(t *testing.T, st budgetStore, metrics http.Handler) *adminHarness {
	t.Helper()
	h := &adminHarness{t: t, store: st, clock: fakeclock.New(start), logs: &syncbuf.Buffer{},
		tokens: filepath.Join(t.TempDir(), "operator-tokens")}
	tok, rec := controlplane.NewOperatorToken("ci bot", start)
	if err := controlplane.AddOperatorToken(h.tokens, rec); err != nil {
		t.Fatal(err)
	}
	h.token = tok
	logger := slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ops, err := controlplane.NewOperatorTokens(h.tokens, &controlplane.OperatorTokensOptions{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	h.svc = budget.New(st, budget.DefaultPrices(), &budget.Options{Now: h.clock.Now})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.svc.Close(ctx)
	})
	kr, err := trust.NewKeyring(tokenKID, map[string][]byte{tokenKID: tokenKey})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := controlplane.New(st, controlplane.Keys{Tokens: kr, CommandSecret: commandSecret, CommandKeyID: commandKID},
		controlplane.TenantEnv{Tenant: tenant, Env: env}, &controlplane.Options{
			Now: h.clock.Now, Logger: logger, Budget: h.svc, Operators: ops, Metrics: metrics,
		})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(cp.Handler())
	t.Cleanup(srv.Close)
	h.url = srv.URL
	return h
}

// do sends a request with the harness's operator token (or auth, when not
// empty) and returns the answer with its body.
func (h *adminHarness) do(method, path, body, auth string) (*http.Response, []byte) {
	h.t.Helper()
	req := newRequest(h.t, method, h.url+path, body)
	if auth == "" {
		auth = "Bearer " + h.token
	}
	if auth != "-" {
		req.Header.Set("Authorization", auth)
	}
	return roundtrip.With(h.t, http.DefaultClient, req)
}

// ok sends a request that must succeed with status and decodes its answer
// into v (when not nil).
func (h *adminHarness) ok(method, path, body string, status int, v any) {
	h.t.Helper()
	resp, b := h.do(method, path, body, "")
	if resp.StatusCode != status {
		h.t.Fatalf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, status, b)
	}
	if v != nil {
		reflect.ValueOf(v).Elem().SetZero() // nothing left of an earlier answer
		decodeJSON(h.t, b, v)
	}
}

func ptr[T any](v T) *T { return &v }

func TestAdminAuth(t *testing.T) {
	h := newAdminHarness(t, openSQLite(t), nil)
	other, otherRec := controlplane.NewOperatorToken("", start)
	id, _, _ := controlplane.ParseOperatorToken(h.token)
	wrongSecret := h.token[:len(h.token)-4] + "AAAA"
	if wrongSecret == h.token {
		wrongSecret = h.token[:len(h.token)-4] + "BBBB"
	}
	identity := trust.NewIdentityToken().Token
	refused := map[string]string{
		"no header":         "-",
		"empty bearer":      "Bearer ",
		"basic":             "Basic " + h.token,
		"token alone":       h.token,
		"malformed":         "Bearer tko_x",
		"identity token":    "Bearer " + identity,
		"unknown id":        "Bearer " + other,
		"wrong secret":      "Bearer " + wrongSecret,
		"id without secret": "Bearer tko_" + id + ".",
		"overlong":          "Bearer tko_" + id + "." + strings.Repeat("a", 300),
		"quoted":            `Bearer "` + h.token + `"`,
	}
	for name, auth := range refused {
		t.Run(name, func(t *testing.T) {
			resp, body := h.do(http.MethodGet, "/api/admin/limits", "", auth)
			wantError(t, resp, body, http.StatusUnauthorized, "unauthorized")
			if resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("no WWW-Authenticate header")
			}
		})
	}
	// Any path under the prefix, and any method, needs the token first.
	for _, path := range []string{"/api/admin/nope", "/api/admin/users/alice/budget", "/api/admin/usage?by=nonsense"} {
		resp, body := h.do(http.MethodGet, path, "", "-")
		wantError(t, resp, body, http.StatusUnauthorized, "unauthorized")
	}
	h.ok(http.MethodGet, "/api/admin/limits", "", http.StatusOK, nil)

	// The file is read again when it changes: a token added works at once,
	// a token removed is refused at once.
	if err := controlplane.AddOperatorToken(h.tokens, otherRec); err != nil {
		t.Fatal(err)
	}
	if resp, body := h.do(http.MethodGet, "/api/admin/limits", "", "Bearer "+other); resp.StatusCode != http.StatusOK {
		t.Errorf("a token issued while running: %d %s", resp.StatusCode, body)
	}
	if _, err := controlplane.RemoveOperatorToken(h.tokens, id); err != nil {
		t.Fatal(err)
	}
	resp, body := h.do(http.MethodGet, "/api/admin/limits", "", "")
	wantError(t, resp, body, http.StatusUnauthorized, "unauthorized")
	// A file that cannot be parsed admits nobody; fixed, it admits again.
	good, err := os.ReadFile(h.tokens)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.tokens, append(good, "garbage\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	resp, body = h.do(http.MethodGet, "/api/admin/limits", "", "Bearer "+other)
	wantError(t, resp, body, http.StatusUnauthorized, "unauthorized")
	if err := os.WriteFile(h.tokens, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if resp, body := h.do(http.MethodGet, "/api/admin/limits", "", "Bearer "+other); resp.StatusCode != http.StatusOK {
		t.Errorf("after the file was fixed: %d %s", resp.StatusCode, body)
	}

	// No log line holds a token or a secret part of one.
	logs := h.logs.String()
	for _, secret := range []string{h.token, other, wrongSecret, identity, strings.SplitN(h.token, ".", 2)[1], strings.SplitN(other, ".", 2)[1]} {
		if strings.Contains(logs, secret) {
			t.Errorf("the log holds a credential:\n%s", logs)
		}
	}
	if !strings.Contains(logs, "operator tokens unusable") {
		t.Errorf("the bad file was not logged:\n%s", logs)
	}
}

func TestAdminNotConfigured(t *testing.T) {
	st := openSQLite(t)
	kr, err := trust.NewKeyring(tokenKID, map[string][]byte{tokenKID: tokenKey})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := controlplane.New(st, controlplane.Keys{Tokens: kr, CommandSecret: commandSecret, CommandKeyID: commandKID},
		controlplane.TenantEnv{Tenant: tenant, Env: env}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(cp.Handler())
	defer srv.Close()
	for _, path := range []string{"/api/admin/limits", "/metrics"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want, code := http.StatusServiceUnavailable, "unavailable"
		if path == "/metrics" {
			want, code = http.StatusNotFound, "not_found"
		}
		wantError(t, resp, body, want, code)
	}
}

func TestAdminValidation(t *testing.T) {
	h := newAdminHarness(t, openSQLite(t), nil)
	tests := map[string]struct {
		method, path, body string
		status             int
		code, msg          string
	}{
		"user id with a dot":        {"PUT", "/api/admin/users/a.b/limits/daily", `{"max_usd":"5"}`, 400, "invalid_id", "user id"},
		"user id with a space":      {"GET", "/api/admin/users/a%20b/limits", "", 400, "invalid_id", "user id"},
		"tenant id":                 {"GET", "/api/admin/tenants/-a/budget", "", 400, "invalid_id", "tenant"},
		"env id":                    {"DELETE", "/api/admin/tenants/acme/envs/p_%20/limits/rpm", "", 400, "invalid_id", "env"},
		"unknown kind":              {"PUT", "/api/admin/users/alice/limits/hourly", `{"max_usd":"5"}`, 400, "bad_request", "unknown kind"},
		"spend given max":           {"PUT", "/api/admin/users/alice/limits/daily", `{"max":5}`, 400, "bad_request", "max_usd"},
		"spend given nothing":       {"PUT", "/api/admin/users/alice/limits/daily", `{"hard":true}`, 400, "bad_request", "max_usd"},
		"count given max_usd":       {"PUT", "/api/admin/users/alice/limits/rpm", `{"max_usd":"5"}`, 400, "bad_request", "whole number in max"},
		"count not whole":           {"PUT", "/api/admin/users/alice/limits/rpm", `{"max":1.5}`, 400, "bad_request", "not valid JSON"},
		"hard count":                {"PUT", "/api/admin/users/alice/limits/rpm", `{"max":5,"hard":true}`, 400, "bad_request", "only spending limits can be hard"},
		"negative spend":            {"PUT", "/api/admin/users/alice/limits/daily", `{"max_usd":"-1"}`, 400, "bad_request", "negative"},
		"negative count":            {"PUT", "/api/admin/users/alice/limits/rpm", `{"max":-1}`, 400, "bad_request", "negative"},
		"too many decimals":         {"PUT", "/api/admin/users/alice/limits/daily", `{"max_usd":"0.0000000001"}`, 400, "bad_request", "nine decimals"},
		"exponent":                  {"PUT", "/api/admin/users/alice/limits/daily", `{"max_usd":1e3}`, 400, "bad_request", "max_usd"},
		"not a number":              {"PUT", "/api/admin/users/alice/limits/daily", `{"max_usd":true}`, 400, "bad_request", "max_usd"},
		"unknown field":             {"PUT", "/api/admin/users/alice/limits/daily", `{"max_usd":"5","maximum":3}`, 400, "bad_request", "unknown field"},
		"empty body":                {"PUT", "/api/admin/users/alice/limits/daily", "", 400, "bad_request", "empty"},
		"trailing data":             {"PUT", "/api/admin/users/alice/limits/daily", `{"max_usd":"5"} {}`, 400, "bad_request", "after the JSON"},
		"body too large":            {"PUT", "/api/admin/users/alice/limits/daily", `{"max_usd":"5","x":"` + strings.Repeat("x", 5000) + `"}`, 413, "body_too_large", "larger"},
		"query on put":              {"PUT", "/api/admin/users/alice/limits/daily?dry=1", `{"max_usd":"5"}`, 400, "bad_request", "no query parameters"},
		"bad scope":                 {"GET", "/api/admin/limits?scope=group", "", 400, "bad_request", "scope"},
		"usage by week":             {"GET", "/api/admin/usage?by=week", "", 400, "bad_request", "cannot group by"},
		"usage by twice":            {"GET", "/api/admin/usage?by=user,user", "", 400, "bad_request", "twice"},
		"usage env without tenant":  {"GET", "/api/admin/usage?env=prod", "", 400, "bad_request", "env needs tenant"},
		"usage bad from":            {"GET", "/api/admin/usage?from=yesterday", "", 400, "bad_request", "from"},
		"usage to before from":      {"GET", "/api/admin/usage?from=2026-11-10&to=2026-11-09T00:00:00Z", "", 400, "bad_request", "not after"},
		"usage limit 0":             {"GET", "/api/admin/usage?limit=0", "", 400, "bad_request", "limit"},
		"usage limit huge":          {"GET", "/api/admin/usage?limit=100000", "", 400, "bad_request", "limit"},
		"usage unknown param":       {"GET", "/api/admin/usage?usr=alice", "", 400, "bad_request", "unknown query parameter"},
		"usage repeated param":      {"GET", "/api/admin/usage?user=a&user=b", "", 400, "bad_request", "2 times"},
		"usage bad user":            {"GET", "/api/admin/usage?user=../x", "", 400, "invalid_id", "user"},
		"usage bad model":           {"GET", "/api/admin/usage?model=a%20b", "", 400, "bad_request", "model"},
		"usage bad order":           {"GET", "/api/admin/usage?order=size", "", 400, "bad_request", "order"},
		"usage malformed query":     {"GET", "/api/admin/usage?by=%zz", "", 400, "bad_request", "malformed"},
		"post limits":               {"POST", "/api/admin/limits", `{}`, 405, "method_not_allowed", "GET"},
		"post a limit":              {"POST", "/api/admin/users/alice/limits/daily", `{}`, 405, "method_not_allowed", "PUT, DELETE"},
		"put status":                {"PUT", "/api/admin/tenants/acme/envs/prod/budget", `{}`, 405, "method_not_allowed", "GET"},
		"unknown path":              {"GET", "/api/admin/users/alice", "", 404, "not_found", "operator API"},
		"unknown path, deeper":      {"GET", "/api/admin/tenants/acme/envs/prod/users/x/limits", "", 404, "not_found", "operator API"},
		"kind on list":              {"GET", "/api/admin/users/alice/limits/daily", "", 405, "method_not_allowed", "PUT"},
		"status with a query param": {"GET", "/api/admin/users/alice/budget?at=now", "", 400, "bad_request", "no query parameters"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			resp, body := h.do(tc.method, tc.path, tc.body, "")
			msg := wantError(t, resp, body, tc.status, tc.code)
			if !strings.Contains(msg, tc.msg) {
				t.Errorf("message %q does not mention %q", msg, tc.msg)
			}
		})
	}
	ls, err := h.svc.Limits(t.Context())
	if err != nil || len(ls) != 0 {
		t.Errorf("refused requests stored limits: %v, %v", ls, err)
	}
}

func TestAdminRoundTripSQLite(t *testing.T) {
	testAdminRoundTrip(t, newAdminHarness(t, openSQLite(t), nil))
}

func TestAdminRoundTripPostgres(t *testing.T) {
	st := storetest.Open(t, postgres.Open, pgtest.URL(t))
	testAdminRoundTrip(t, newAdminHarness(t, st, nil))
}

// testAdminRoundTrip sets, reads and deletes limits, reads a subject's
// budget with calls settled and in flight, and reports usage, all over
// HTTP.
func testAdminRoundTrip(t *testing.T, h *adminHarness) {
	at := start.UTC() // 2026-11-30 16:00, a Monday
	limit := func(scope budget.Scope, subject string, kind budget.Kind, usd string, max int64, hard bool) controlplane.LimitJSON {
		l := controlplane.LimitJSON{Scope: scope, Subject: subject, Kind: kind, Hard: hard, UpdatedAt: at}
		if usd != "" {
			l.MaxUSD = &usd
		} else {
			l.Max = &max
		}
		return l
	}

	// Set, by short and full names; money as a string or a JSON number.
	var got controlplane.LimitJSON
	h.ok("PUT", "/api/admin/users/alice/limits/daily", `{"max_usd":"5.00","hard":true}`, 200, &got)
	if diff := cmp.Diff(limit("user", "alice", budget.SpendPerDay, "5.00", 0, true), got); diff != "" {
		t.Errorf("PUT daily (-want +got):\n%s", diff)
	}
	h.ok("PUT", "/api/admin/users/alice/limits/rpm", `{"max":60}`, 200, nil)
	h.ok("PUT", "/api/admin/tenants/acme/limits/spend_per_month", `{"max_usd":100.5}`, 200, nil)
	h.ok("PUT", "/api/admin/tenants/acme/envs/prod/limits/concurrency", `{"max":4}`, 200, nil)
	h.ok("PUT", "/api/admin/tenants/acme/envs/prod/limits/tokens-per-day", `{"max":2000000}`, 200, nil)
	// Replaced: soft now, another amount.
	h.ok("PUT", "/api/admin/users/alice/limits/spend_per_day", `{"max_usd":"7.25"}`, 200, &got)
	if diff := cmp.Diff(limit("user", "alice", budget.SpendPerDay, "7.25", 0, false), got); diff != "" {
		t.Errorf("PUT again (-want +got):\n%s", diff)
	}

	var ls controlplane.LimitsJSON
	h.ok("GET", "/api/admin/users/alice/limits", "", 200, &ls)
	want := []controlplane.LimitJSON{
		limit("user", "alice", budget.RequestsPerMinute, "", 60, false),
		limit("user", "alice", budget.SpendPerDay, "7.25", 0, false),
	}
	if diff := cmp.Diff(want, ls.Limits); diff != "" {
		t.Errorf("GET alice (-want +got):\n%s", diff)
	}
	h.ok("GET", "/api/admin/limits", "", 200, &ls)
	if len(ls.Limits) != 5 {
		t.Errorf("GET all: %d limits, want 5: %+v", len(ls.Limits), ls.Limits)
	}
	h.ok("GET", "/api/admin/limits?scope=env", "", 200, &ls)
	if diff := cmp.Diff([]controlplane.LimitJSON{
		limit("env", "acme/prod", budget.Concurrent, "", 4, false),
		limit("env", "acme/prod", budget.TokensPerDay, "", 2_000_000, false),
	}, ls.Limits); diff != "" {
		t.Errorf("GET env scope (-want +got):\n%s", diff)
	}
	h.ok("GET", "/api/admin/tenants/acme/envs/prod/limits", "", 200, &ls)
	if len(ls.Limits) != 2 {
		t.Errorf("GET acme/prod: %+v", ls.Limits)
	}

	// Calls: two settled today and one earlier this month, one in flight.
	settle := func(id, user, tenantName, envName, conv, model string, cost budget.Money, in, out int64, when time.Time) {
		t.Helper()
		_, err := h.store.SettleBudget(t.Context(), budget.Entry{ID: id, Tenant: tenantName, Env: envName, User: user, Conversation: conv,
			Usage: budget.Usage{Model: model, InputTokens: in, OutputTokens: out, CacheReadTokens: 1000},
			Cost:  cost, Status: 200, StartedAt: when.Add(-time.Second), SettledAt: when})
		if err != nil {
			t.Fatal(err)
		}
	}
	settle("e1", "alice", "acme", "prod", "c1", "claude-sonnet-4-6", 1_250_000_000, 1000, 200, at.Add(-time.Hour))
	settle("e2", "alice", "acme", "prod", "c2", "claude-haiku-4-5", 17_385_000, 2000, 300, at.Add(-30*time.Minute))
	settle("e3", "bob", "acme", "staging", "c3", "claude-sonnet-4-6", 500_000_000, 100, 20, at.AddDate(0, 0, -3))
	settle("e4", "carol", "globex", "dev", "c4", "claude-sonnet-4-6", 9_000_000_000, 1, 1, at.AddDate(0, -1, 0)) // last month
	hold, err := h.svc.Reserve(t.Context(), budget.Call{ID: "inflight", Tenant: "acme", Env: "prod", User: "alice",
		Conversation: "c1", Model: "claude-sonnet-4-6", RequestBytes: 4000})
	if err != nil {
		t.Fatal(err)
	}
	held := hold.Reserved()
	if held <= 0 {
		t.Fatal("the call in flight holds nothing")
	}

	var st controlplane.StatusJSON
	h.ok("GET", "/api/admin/users/alice/budget", "", 200, &st)
	usedUSD := "1.267385"
	wantStatus := controlplane.StatusJSON{Scope: "user", Subject: "alice", At: at, Limits: []controlplane.LimitStatusJSON{
		{LimitJSON: limit("user", "alice", budget.RequestsPerMinute, "", 60, false),
			Used: ptr[int64](1), Held: ptr[int64](0), Remaining: ptr[int64](59), Window: "minute", ResetsAt: ptr(at.Add(time.Minute))},
		{LimitJSON: limit("user", "alice", budget.SpendPerDay, "7.25", 0, false),
			UsedUSD: &usedUSD, HeldUSD: ptr(strings.TrimPrefix(held.String(), "$")),
			RemainingUSD: ptr(strings.TrimPrefix((7_250_000_000 - 1_267_385_000 - held).String(), "$")),
			Window:       "day", ResetsAt: ptr(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))},
	}}
	if diff := cmp.Diff(wantStatus, st); diff != "" {
		t.Errorf("GET alice's budget (-want +got):\n%s", diff)
	}
	h.ok("GET", "/api/admin/tenants/acme/envs/prod/budget", "", 200, &st)
	if len(st.Limits) != 2 || *st.Limits[0].Held != 1 || *st.Limits[0].Remaining != 3 || st.Limits[0].ResetsAt != nil ||
		*st.Limits[1].Used != 1000+200+2000+300 || st.Limits[1].Window != "day" {
		t.Errorf("GET acme/prod's budget: %+v", st.Limits)
	}
	hold.Settle(budget.Settlement{Usage: budget.Usage{Model: "claude-sonnet-4-6", InputTokens: 10, OutputTokens: 10}, Status: 200})
	if err := h.svc.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}

	// Delete, twice: the second changes nothing.
	h.ok("DELETE", "/api/admin/users/alice/limits/rpm", "", 204, nil)
	h.ok("DELETE", "/api/admin/users/alice/limits/requests_per_minute", "", 204, nil)
	h.ok("GET", "/api/admin/users/alice/limits", "", 200, &ls)
	if len(ls.Limits) != 1 || ls.Limits[0].Kind != budget.SpendPerDay {
		t.Errorf("after DELETE: %+v", ls.Limits)
	}

	// Usage: this month by user (by cost), then by model and day.
	var u controlplane.UsageJSON
	h.ok("GET", "/api/admin/usage?by=user", "", 200, &u)
	alice := controlplane.TotalsJSON{Requests: 3, InputTokens: 3010, OutputTokens: 510, CacheReadTokens: 2000, CostUSD: "1.267565"}
	bob := controlplane.TotalsJSON{Requests: 1, InputTokens: 100, OutputTokens: 20, CacheReadTokens: 1000, CostUSD: "0.50"}
	wantUsage := controlplane.UsageJSON{
		By: []budget.Dimension{"user"}, From: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), Order: "cost",
		Rows: []controlplane.UsageRowJSON{
			{Key: map[string]string{"user": "alice"}, TotalsJSON: alice},
			{Key: map[string]string{"user": "bob"}, TotalsJSON: bob},
		},
		Total: controlplane.TotalsJSON{Requests: 4, InputTokens: 3110, OutputTokens: 530, CacheReadTokens: 3000, CostUSD: "1.767565"},
	}
	if diff := cmp.Diff(wantUsage, u); diff != "" {
		t.Errorf("usage by user (-want +got):\n%s", diff)
	}
	h.ok("GET", "/api/admin/usage?by=model,day&from=2026-10-01&to=2026-11-30&tenant=acme&limit=2", "", 200, &u)
	wantUsage = controlplane.UsageJSON{
		By: []budget.Dimension{"model", "day"}, From: time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC),
		To: ptr(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)), Order: "key",
		Rows: []controlplane.UsageRowJSON{
			{Key: map[string]string{"model": "claude-haiku-4-5", "day": "2026-11-30"},
				TotalsJSON: controlplane.TotalsJSON{Requests: 1, InputTokens: 2000, OutputTokens: 300, CacheReadTokens: 1000, CostUSD: "0.017385"}},
			{Key: map[string]string{"model": "claude-sonnet-4-6", "day": "2026-11-27"}, TotalsJSON: bob},
		},
		Total:   controlplane.TotalsJSON{Requests: 4, InputTokens: 3110, OutputTokens: 530, CacheReadTokens: 3000, CostUSD: "1.767565"},
		Omitted: 1,
	}
	if diff := cmp.Diff(wantUsage, u); diff != "" {
		t.Errorf("usage by model and day (-want +got):\n%s", diff)
	}
	h.ok("GET", "/api/admin/usage?by=conversation&user=alice&model=claude-sonnet-4-6", "", 200, &u)
	if len(u.Rows) != 1 || u.Rows[0].Key["conversation"] != "c1" || u.Rows[0].Requests != 2 || u.Total.Requests != 2 {
		t.Errorf("usage of alice's sonnet calls by conversation: %+v", u)
	}

	// Every change was logged with the operator's token id, not the token.
	id, _, _ := controlplane.ParseOperatorToken(h.token)
	logs := h.logs.String()
	if !strings.Contains(logs, `"msg":"operator: limit set","operator":"`+id+`"`) || !strings.Contains(logs, `"msg":"operator: limit deleted"`) {
		t.Errorf("changes not logged with the operator's id:\n%s", logs)
	}
	if strings.Contains(logs, strings.SplitN(h.token, ".", 2)[1]) {
		t.Error("the log holds the operator token")
	}
}

func TestMetricsRoute(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "talkide_up 1\n") })
	h := newAdminHarness(t, openSQLite(t), metrics)
	resp, body := h.do("GET", "/metrics", "", "-") // no credential needed
	if resp.StatusCode != 200 || string(body) != "talkide_up 1\n" {
		t.Errorf("GET /metrics: %d %q", resp.StatusCode, body)
	}
	resp, body = h.do("POST", "/metrics", "{}", "-")
	wantError(t, resp, body, http.StatusMethodNotAllowed, "method_not_allowed")
}

func TestOperatorTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ops")
	ts, err := controlplane.ReadOperatorTokens(path)
	if err != nil || len(ts) != 0 {
		t.Fatalf("a missing file: %v, %v", ts, err)
	}
	tok1, r1 := controlplane.NewOperatorToken("  ci \n bot ", start)
	tok2, r2 := controlplane.NewOperatorToken("", start.Add(time.Hour))
	for _, r := range []controlplane.OperatorToken{r1, r2} {
		if err := controlplane.AddOperatorToken(path, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := controlplane.AddOperatorToken(path, r1); err == nil {
		t.Error("the same id was added twice")
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode: %v, %v", fi.Mode(), err)
	}
	b, _ := os.ReadFile(path)
	for _, tok := range []string{tok1, tok2} {
		if strings.Contains(string(b), strings.SplitN(tok, ".", 2)[1]) {
			t.Fatalf("the file holds a token's secret:\n%s", b)
		}
	}
	ts, err = controlplane.ReadOperatorTokens(path)
	if diff := cmp.Diff([]controlplane.OperatorToken{{ID: r1.ID, Hash: r1.Hash, CreatedAt: start, Name: "ci bot"}, r2}, ts); diff != "" || err != nil {
		t.Errorf("read back (-want +got): %v\n%s", err, diff)
	}
	ops, err := controlplane.NewOperatorTokens(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ops.Verify(tok1); err != nil || got.ID != r1.ID {
		t.Errorf("Verify(tok1) = %v, %v", got, err)
	}
	if _, err := controlplane.RemoveOperatorToken(path, r1.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.Verify(tok1); err == nil {
		t.Error("a removed token still verifies")
	}
	if _, err := controlplane.RemoveOperatorToken(path, r1.ID); err == nil {
		t.Error("removing a missing token is not an error")
	}
	for name, content := range map[string]string{
		"short line": "abc def\n",
		"bad hash":   r2.ID + " 1234 2026-11-30T16:00:00Z\n",
		"bad time":   r2.ID + " " + strings.Repeat("ab", 32) + " yesterday\n",
		"bad id":     "a.b " + strings.Repeat("ab", 32) + " 2026-11-30T16:00:00Z\n",
		"twice":      strings.Repeat(r2.ID+" "+strings.Repeat("ab", 32)+" 2026-11-30T16:00:00Z\n", 2),
	} {
		if _, err := controlplane.ParseOperatorTokens([]byte("# comment\n\n" + content)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad")
	os.WriteFile(bad, []byte("nonsense\n"), 0o600)
	if _, err := controlplane.NewOperatorTokens(bad, nil); err == nil {
		t.Error("a malformed file at start is not an error")
	}
}

// TestOperatorTokenFileWrittenBefore: a token file as talkide admin
// operator-token wrote it before the token code was shared (the hash
// computed outside Go) still admits its token, and a rewrite keeps its
// line as it was.
func TestOperatorTokenFileWrittenBefore(t *testing.T) {
	const (
		token = "tko_Qw8eRt5yUi2o.b0x5Y2hMQnV0dGVyZmx5U3BhcmtsZXNUd2lua2xlXzE"
		line  = "Qw8eRt5yUi2o 794f3e16f5ecc81fd31b2d222a2a31333c7d18c100cb0983c0c5fef971fd0a5e 2026-11-30T16:00:00Z ci bot\n"
	)
	path := filepath.Join(t.TempDir(), "ops")
	header := "# TalkIDE operator tokens: id, SHA-256 of the secret, created, name. Kept by talkide admin operator-token.\n"
	if err := os.WriteFile(path, []byte(header+line), 0o600); err != nil {
		t.Fatal(err)
	}
	ops, err := controlplane.NewOperatorTokens(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ops.Verify(token); err != nil || got.ID != "Qw8eRt5yUi2o" || got.Name != "ci bot" || !got.CreatedAt.Equal(start) {
		t.Fatalf("Verify = %+v, %v", got, err)
	}
	_, other := controlplane.NewOperatorToken("other", start)
	if err := controlplane.AddOperatorToken(path, other); err != nil {
		t.Fatal(err)
	}
	if _, err := controlplane.RemoveOperatorToken(path, other.ID); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != header+line {
		t.Errorf("rewritten as\n%s", b)
	}
}

func FuzzParseOperatorToken(f *testing.F) {
	tok, _ := controlplane.NewOperatorToken("", start)
	for _, s := range []string{tok, "", "tko_", "tko_a.b", "tko_.", "tki_abc.defghijklmnopqrstuvwxyz", "tko_a.bbbbbbbbbbbbbbbb\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, _, err := controlplane.ParseOperatorToken(s)
		if err != nil {
			if err.Error() != "not a valid operator token" {
				t.Errorf("error %q: want the one fixed message, which never holds the input", err)
			}
			return
		}
		if !strings.HasPrefix(s, "tko_"+id+".") || len(s) > controlplane.MaxOperatorTokenLen {
			t.Errorf("accepted %q as id %q", s, id)
		}
	})
}
