package controlplane_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/auth"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/store"
)

// seedReports gives a1 (alice, acme/prod), b1 (bob, acme/staging) and d1
// (dave, beta/prod) reports of each kind and a model call each.
func seedReports(t *testing.T, tn *tenancy) {
	t.Helper()
	ctx := t.Context()
	for i, c := range []struct{ conv, tenant, env, user string }{{"a1", "acme", "prod", "alice"}, {"b1", "acme", "staging", "bob"}, {"d1", "beta", "prod", "dave"}} {
		at := start.Add(time.Duration(i) * time.Minute)
		rs := []contract.Report{
			{IdempotencyKey: c.conv + "/tool", Kind: contract.ReportToolUse, ConversationID: c.conv, TurnID: "t_1", Time: at,
				Tool: &contract.ToolReport{ID: "toolu_" + c.conv, Name: "Bash", DurationMS: 12}},
			{IdempotencyKey: c.conv + "/activity", Kind: contract.ReportActivity, ConversationID: c.conv, TurnID: "t_1", Time: at.Add(time.Second), Activity: "ran the tests of " + c.conv},
			{IdempotencyKey: c.conv + "/usage", Kind: contract.ReportUsage, ConversationID: c.conv, TurnID: "t_1", Time: at.Add(2 * time.Second),
				Usage: &contract.Usage{Model: "claude-sonnet-4-5", InputTokens: 10, OutputTokens: 5}},
		}
		_, _, err := tn.store.AddReports(ctx, c.tenant, c.env, rs, at)
		must(t, err)
		must(t, tn.store.RecordUsage(ctx, store.UsageRecord{ID: "u-" + c.conv, Tenant: c.tenant, Env: c.env, ConversationID: c.conv, UserID: c.user,
			Model: "claude-sonnet-4-5", Status: 200, InputTokens: 10, OutputTokens: 5, StartedAt: at}))
	}
}

type reportsPage struct {
	Reports []controlplane.ReportView `json:"reports"`
	Next    string                    `json:"next"`
}

// TestTenantReports: a tenant's reports and model calls, paged, to its
// tenant-admins only (an env's admin naming the env); everyone else is told
// the tenant does not exist; a conversation's reports to whoever sees it.
func TestTenantReports(t *testing.T) {
	tn := newTenancy(t, nil)
	tn.create("alice", "a1", "acme/prod")
	tn.create("bob", "b1", "acme/staging")
	tn.create("dave", "d1", "beta/prod")
	seedReports(t, tn)
	// gina administers acme/staging only.
	must(t, tn.store.PutUser(t.Context(), store.User{ID: "gina", Name: "gina", CreatedAt: start}))
	_, err := tn.store.PutMembership(t.Context(), store.Membership{UserID: "gina", Tenant: "acme", Env: "staging", Role: store.RoleTenantAdmin, CreatedAt: start})
	must(t, err)
	tok, _, err := auth.IssueAPIToken(t.Context(), tn.store, "gina", "test", 0, start)
	must(t, err)
	tn.tokens["gina"] = tok

	paths := map[string]string{
		"acme":         "/api/tenants/acme/reports",
		"acme/staging": "/api/tenants/acme/reports?env=staging",
		"acme/prod":    "/api/tenants/acme/reports?env=prod",
		"beta":         "/api/tenants/beta/reports",
		"acme usage":   "/api/tenants/acme/usage",
		"beta usage":   "/api/tenants/beta/usage?env=prod",
		"nope":         "/api/tenants/nope/reports",
	}
	allowed := map[string][]string{
		"carol": {"acme", "acme/staging", "acme/prod", "acme usage"},
		"erin":  {"beta", "beta usage"},
		"gina":  {"acme/staging"},
	}
	tn.reach([]string{"alice", "bob", "carol", "frank", "dave", "erin", "gina"}, paths, allowed, nil)

	// carol pages through acme's: six reports, newest first, two a page.
	var got []string
	next := ""
	for range 10 {
		p := "/api/tenants/acme/reports?limit=2"
		if next != "" {
			p += "&before=" + url.QueryEscape(next)
		}
		resp, body := tn.as("carol", http.MethodGet, p, "", nil)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", p, resp.StatusCode, body)
		}
		var page reportsPage
		decodeJSON(t, body, &page)
		if len(page.Reports) > 2 {
			t.Fatalf("a page of %d", len(page.Reports))
		}
		for _, r := range page.Reports {
			got = append(got, r.ConversationID+"/"+r.Kind)
		}
		if next = page.Next; next == "" {
			break
		}
	}
	want := []string{"b1/usage", "b1/activity", "b1/tool_use", "a1/usage", "a1/activity", "a1/tool_use"}
	if !slices.Equal(got, want) {
		t.Errorf("acme's reports: %v, want %v", got, want)
	}
	// gina sees acme/staging's tool calls only.
	resp, body := tn.as("gina", http.MethodGet, "/api/tenants/acme/reports?env=staging&kind=tool_use", "", nil)
	var page reportsPage
	decodeJSON(t, body, &page)
	if resp.StatusCode != 200 || len(page.Reports) != 1 || page.Reports[0].Tool == nil || page.Reports[0].Tool.Name != "Bash" || page.Reports[0].Env != "staging" {
		t.Errorf("gina's tool calls: %d %s", resp.StatusCode, body)
	}
	// erin's model calls of beta.
	resp, body = tn.as("erin", http.MethodGet, "/api/tenants/beta/usage", "", nil)
	var usage struct {
		Usage []controlplane.UsageRecordView `json:"usage"`
	}
	decodeJSON(t, body, &usage)
	if resp.StatusCode != 200 || len(usage.Usage) != 1 || usage.Usage[0].User != "dave" || usage.Usage[0].InputTokens != 10 {
		t.Errorf("beta's usage: %d %s", resp.StatusCode, body)
	}
	// A conversation's activity log, to its owner.
	resp, body = tn.as("alice", http.MethodGet, "/api/conversations/a1/reports?kind=activity", "", nil)
	decodeJSON(t, body, &page)
	if resp.StatusCode != 200 || len(page.Reports) != 1 || page.Reports[0].Activity != "ran the tests of a1" || page.Next != "" {
		t.Errorf("a1's activity: %d %s", resp.StatusCode, body)
	}

	for name, p := range map[string]string{
		"limit 0":              "/api/tenants/acme/reports?limit=0",
		"limit too large":      "/api/tenants/acme/reports?limit=501",
		"limit not a number":   "/api/tenants/acme/reports?limit=ten",
		"bad kind":             "/api/tenants/acme/reports?kind=secrets",
		"bad cursor":           "/api/tenants/acme/reports?before=abc",
		"cursor not json":      "/api/tenants/acme/reports?before=" + "bm90IGpzb24",
		"cursor unknown field": "/api/tenants/acme/reports?before=" + "eyJ4IjoxfQ",
		"unknown param":        "/api/tenants/acme/reports?user=alice",
		"kind on usage":        "/api/tenants/acme/usage?kind=usage",
		"bad env":              "/api/tenants/acme/reports?env=../x",
		"repeated":             "/api/tenants/acme/reports?limit=1&limit=2",
		"conversation env":     "/api/conversations/a1/reports?env=staging",
	} {
		resp, body := tn.as("carol", http.MethodGet, p, "", nil)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(resp.Header.Get("Content-Type"), "json") {
			t.Errorf("%s: %d %s, want a 400 JSON error", name, resp.StatusCode, body)
		}
	}
	if resp, body := tn.as("carol", http.MethodGet, "/api/tenants/..%2fx/reports", "", nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a bad tenant id: %d %s", resp.StatusCode, body)
	}
	if resp, _ := tn.as("", http.MethodGet, "/api/tenants/acme/reports", "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a credential: %d", resp.StatusCode)
	}
	if resp, _ := tn.as("carol", http.MethodPost, "/api/tenants/acme/reports", "", nil); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", resp.StatusCode)
	}
}
