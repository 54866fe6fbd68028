package controlplane_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/store"
)

// TestAdminAccounts: the operator API adds, lists and removes memberships
// (creating the user), issues an API token, lists tokens without their
// secrets, and revokes them; bad input is a JSON error that changes
// nothing.
func TestAdminAccounts(t *testing.T) {
	st := openSQLite(t)
	h := newAdminHarness(t, st, nil)
	ctx := t.Context()
	for _, e := range []string{"prod", "staging"} {
		if err := st.PutEnv(ctx, store.Env{Tenant: "acme", Name: e, WorkerURL: "http://127.0.0.1:1", CreatedAt: start}); err != nil {
			t.Fatal(err)
		}
	}

	var m controlplane.MembershipView
	h.ok("PUT", "/api/admin/tenants/acme/members/alice", `{"name":"Alice"}`, http.StatusOK, &m)
	if m.User != "alice" || m.Tenant != "acme" || m.Env != "" || m.Role != "member" {
		t.Errorf("tenant-wide membership: %+v", m)
	}
	if u, err := st.GetUser(ctx, "alice"); err != nil || u.Name != "Alice" {
		t.Errorf("the user was not created: %+v %v", u, err)
	}
	h.ok("PUT", "/api/admin/tenants/acme/envs/staging/members/bob", `{"role":"tenant-admin"}`, http.StatusOK, &m)
	if m.Env != "staging" || m.Role != "tenant-admin" {
		t.Errorf("env membership: %+v", m)
	}
	// Again: the role changes, the membership is not doubled.
	h.ok("PUT", "/api/admin/tenants/acme/members/alice", `{"role":"tenant-admin"}`, http.StatusOK, &m)
	var list struct{ Memberships []controlplane.MembershipView }
	h.ok("GET", "/api/admin/memberships?tenant=acme", "", http.StatusOK, &list)
	if len(list.Memberships) != 2 || list.Memberships[0].User != "alice" || list.Memberships[0].Role != "tenant-admin" || list.Memberships[1].User != "bob" {
		t.Errorf("memberships of acme: %+v", list.Memberships)
	}
	h.ok("GET", "/api/admin/memberships?user=bob", "", http.StatusOK, &list)
	if len(list.Memberships) != 1 || list.Memberships[0].Env != "staging" {
		t.Errorf("memberships of bob: %+v", list.Memberships)
	}

	for name, c := range map[string]struct {
		method, path, body string
		status             int
	}{
		"unknown tenant":      {"PUT", "/api/admin/tenants/nope/members/carol", "", 404},
		"unknown env":         {"PUT", "/api/admin/tenants/acme/envs/nope/members/carol", "", 404},
		"bad role":            {"PUT", "/api/admin/tenants/acme/members/carol", `{"role":"operator"}`, 400},
		"unknown field":       {"PUT", "/api/admin/tenants/acme/members/carol", `{"rôle":"member"}`, 400},
		"bad user id":         {"PUT", "/api/admin/tenants/acme/members/..", "", 400},
		"bad name":            {"PUT", "/api/admin/tenants/acme/members/carol", `{"name":"a\nb"}`, 400},
		"too large":           {"PUT", "/api/admin/tenants/acme/members/carol", `{"name":"` + strings.Repeat("a", 5000) + `"}`, 413},
		"remove unknown":      {"DELETE", "/api/admin/tenants/acme/members/carol", "", 404},
		"list no selector":    {"GET", "/api/admin/memberships", "", 400},
		"list unknown param":  {"GET", "/api/admin/memberships?tenant=acme&role=x", "", 400},
		"token unknown user":  {"POST", "/api/admin/users/carol/api-tokens", "", 404},
		"token bad ttl":       {"POST", "/api/admin/users/alice/api-tokens", `{"ttl":"-1h"}`, 400},
		"token not json":      {"POST", "/api/admin/users/alice/api-tokens", `{"ttl":`, 400},
		"revoke a whole one":  {"DELETE", "/api/admin/api-tokens/tka_abc.def", "", 404},
		"revoke unknown":      {"DELETE", "/api/admin/api-tokens/abcdef", "", 404},
		"tokens bad user":     {"GET", "/api/admin/api-tokens?user=../x", "", 400},
		"wrong method":        {"POST", "/api/admin/memberships", "", 405},
		"membership by GET":   {"GET", "/api/admin/tenants/acme/members/alice", "", 405},
		"token list by POST":  {"POST", "/api/admin/api-tokens", "", 405},
		"no operator token":   {"GET", "/api/admin/memberships?tenant=acme", "", 401},
		"no token to issue":   {"POST", "/api/admin/users/alice/api-tokens", "", 401},
		"no token to removal": {"DELETE", "/api/admin/tenants/acme/members/alice", "", 401},
	} {
		auth := ""
		if strings.HasPrefix(name, "no ") && c.status == 401 {
			auth = "-"
		}
		resp, body := h.do(c.method, c.path, c.body, auth)
		if resp.StatusCode != c.status || !strings.Contains(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s: %d %q %s, want %d JSON", name, resp.StatusCode, resp.Header.Get("Content-Type"), body, c.status)
		}
	}
	if _, err := st.GetUser(ctx, "carol"); err == nil {
		t.Error("a refused request created carol")
	}
	if ms, _ := st.ListMemberships(ctx, "alice", ""); len(ms) != 1 {
		t.Errorf("refused requests changed alice's memberships: %+v", ms)
	}

	var issued struct {
		Token    string
		APIToken controlplane.APITokenView `json:"api_token"`
	}
	h.ok("POST", "/api/admin/users/alice/api-tokens", `{"name":"laptop","ttl":"1h"}`, http.StatusCreated, &issued)
	if !strings.HasPrefix(issued.Token, "tka_"+issued.APIToken.ID+".") || issued.APIToken.User != "alice" || issued.APIToken.Name != "laptop" ||
		issued.APIToken.ExpiresAt == nil || issued.APIToken.ExpiresAt.Sub(start) != 3600e9 {
		t.Errorf("issued: %+v", issued)
	}
	resp, body := h.do("GET", "/api/admin/api-tokens", "", "")
	secret := issued.Token[strings.Index(issued.Token, ".")+1:]
	if resp.StatusCode != 200 || !strings.Contains(string(body), issued.APIToken.ID) || strings.Contains(string(body), secret) {
		t.Errorf("token list: %d %s", resp.StatusCode, body)
	}
	if strings.Contains(h.logs.String(), secret) {
		t.Error("the log holds the token's secret")
	}
	var toks struct {
		APITokens []controlplane.APITokenView `json:"api_tokens"`
	}
	h.ok("GET", "/api/admin/api-tokens?user=bob", "", http.StatusOK, &toks)
	if len(toks.APITokens) != 0 {
		t.Errorf("bob's tokens: %+v", toks.APITokens)
	}
	h.ok("DELETE", "/api/admin/api-tokens/"+issued.APIToken.ID, "", http.StatusOK, &issued)
	if issued.APIToken.RevokedAt == nil {
		t.Errorf("revoked: %+v", issued.APIToken)
	}
	rec, err := st.GetAPIToken(ctx, issued.APIToken.ID)
	if err != nil || rec.RevokedAt.IsZero() {
		t.Errorf("stored token after revoke: %+v %v", rec, err)
	}

	h.ok("DELETE", "/api/admin/tenants/acme/envs/staging/members/bob", "", http.StatusNoContent, nil)
	if ms, _ := st.ListMemberships(ctx, "bob", ""); len(ms) != 0 {
		t.Errorf("bob's memberships after removal: %+v", ms)
	}

	// An operator browses any tenant's reports and model calls.
	_, _, err = st.AddReports(ctx, "acme", "prod", []contract.Report{
		{IdempotencyKey: "k1", Kind: contract.ReportActivity, ConversationID: "c1", Time: start, Activity: "ran the build"},
		{IdempotencyKey: "k2", Kind: contract.ReportToolUse, ConversationID: "c1", Time: start, Tool: &contract.ToolReport{ID: "toolu_1", Name: "Bash"}},
	}, start)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RecordUsage(ctx, store.UsageRecord{ID: "u1", Tenant: "acme", Env: "prod", ConversationID: "c1", UserID: "alice", Model: "m", StartedAt: start}); err != nil {
		t.Fatal(err)
	}
	var reps struct {
		Reports []controlplane.ReportView `json:"reports"`
		Next    string                    `json:"next"`
	}
	h.ok("GET", "/api/admin/tenants/acme/reports?kind=activity&limit=1", "", http.StatusOK, &reps)
	if len(reps.Reports) != 1 || reps.Reports[0].Activity != "ran the build" || reps.Next != "" {
		t.Errorf("acme's activity: %+v", reps)
	}
	h.ok("GET", "/api/admin/tenants/acme/reports?limit=1", "", http.StatusOK, &reps)
	if len(reps.Reports) != 1 || reps.Next == "" {
		t.Errorf("acme's first page of one: %+v", reps)
	}
	var use struct {
		Usage []controlplane.UsageRecordView `json:"usage"`
	}
	h.ok("GET", "/api/admin/tenants/acme/usage?env=prod", "", http.StatusOK, &use)
	if len(use.Usage) != 1 || use.Usage[0].User != "alice" {
		t.Errorf("acme's usage: %+v", use)
	}
	for p, status := range map[string]int{"/api/admin/tenants/acme/reports?limit=-1": 400, "/api/admin/tenants/acme/usage?kind=usage": 400} {
		if resp, body := h.do("GET", p, "", ""); resp.StatusCode != status {
			t.Errorf("%s: %d %s", p, resp.StatusCode, body)
		}
	}
	if resp, _ := h.do("GET", "/api/admin/tenants/acme/reports", "", "-"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("reports without an operator token: %d", resp.StatusCode)
	}
}
