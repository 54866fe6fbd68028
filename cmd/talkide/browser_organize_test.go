package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/auth"
	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/store"
)

// TestBrowserOrganize: rename and archive round trip in the browser, by
// keyboard, and the running mark of a conversation that is not open; the
// store holds what the page showed.
func TestBrowserOrganize(t *testing.T) {
	browserParallel(t)
	st, _ := startTestStack(t)
	res := runScenario(t, st, "organize", noSteps(t))
	id, _ := res["conversation"].(string)
	c, err := st.ControlPlane.Store.GetConversation(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if c.Title != "Renamed by keyboard" || !c.ArchivedAt.IsZero() {
		t.Errorf("stored after the scenario: title %q, archived at %v", c.Title, c.ArchivedAt)
	}
}

// TestBrowserBudget: a daily limit the operator set shows in the header as
// used and remaining, moved by a turn to what the budget service says; the
// turn's footer shows the cost the ledger charged for it.
func TestBrowserBudget(t *testing.T) {
	browserParallel(t)
	st, _ := startTestStack(t)
	limit := 5 * budget.Dollar
	if err := st.ControlPlane.Budget.SetLimit(t.Context(), budget.Limit{Subject: budget.User(roles.DevUser), Kind: budget.SpendPerDay, Max: int64(limit)}); err != nil {
		t.Fatal(err)
	}
	res := runScenario(t, st, "budget", noSteps(t))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := st.ControlPlane.Budget.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ls, err := st.ControlPlane.Budget.Status(ctx, budget.User(roles.DevUser))
	if err != nil || len(ls) != 1 {
		t.Fatalf("status %+v, %v", ls, err)
	}
	used := budget.Money(ls[0].Used)
	after, _ := res["after"].(map[string]any)
	before, _ := res["before"].(map[string]any)
	usd := func(m budget.Money) string { return strings.TrimPrefix(m.String(), "$") }
	if before["used"] != "0.00" || before["remaining"] != usd(limit) {
		t.Errorf("before the turn the header had %v, want 0.00 used, %s left", before, usd(limit))
	}
	if after["used"] != usd(used) || after["remaining"] != usd(limit-used) {
		t.Errorf("after the turn the header had %v, want %s used and %s left", after, usd(used), usd(limit-used))
	}
	// One turn, so what the footer charged is all that was used.
	if cost := fmt.Sprint(res["cost"]); cost != usd(used) {
		t.Errorf("the footer's cost is %s, the budget counted %s", cost, usd(used))
	}
	t.Logf("header: %v", res["text"])
}

// TestBrowserTenantBudget: on a shared control-plane (no local user,
// API tokens), a member sends a message, is offered no tenant budget and
// is refused it by the API; then the tenant's administrator opens it from
// the header and sees the tenant's limit and the member's, with what the
// budget service counts, and the member's spend as the ledger has it.
func TestBrowserTenantBudget(t *testing.T) {
	browserParallel(t)
	st := startDevT(t, roles.DevConfig{
		DataDir: t.TempDir(), Addr: "127.0.0.1:0",
		Login:  &roles.AuthConfig{TrustedHeader: auth.DefaultTrustedHeader, SessionIdle: time.Hour, SessionAbsolute: 2 * time.Hour},
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	ctx := t.Context()
	now := time.Now().UTC()
	tokens := map[string]string{}
	for user, role := range map[string]store.Role{"alice": store.RoleMember, "carol": store.RoleTenantAdmin} {
		must(t, st.ControlPlane.Store.PutUser(ctx, store.User{ID: user, Name: user, CreatedAt: now}))
		_, err := st.ControlPlane.Store.PutMembership(ctx, store.Membership{UserID: user, Tenant: roles.DevTenant, Role: role, CreatedAt: now})
		must(t, err)
		tok, _, err := auth.IssueAPIToken(ctx, st.ControlPlane.Store, user, "browser", 0, now)
		must(t, err)
		tokens[user] = tok
	}
	for _, l := range []budget.Limit{
		{Subject: budget.Tenant(roles.DevTenant), Kind: budget.SpendPerDay, Max: int64(50 * budget.Dollar)},
		{Subject: budget.User("alice"), Kind: budget.SpendPerDay, Max: int64(5 * budget.Dollar)},
	} {
		must(t, st.ControlPlane.Budget.SetLimit(ctx, l))
	}
	env := func(user, expect string) []string {
		return []string{"TALKIDE_AUTHORIZATION=Bearer " + tokens[user], "TALKIDE_EXPECT=" + expect, "TALKIDE_TENANT=" + roles.DevTenant}
	}

	member := runScenarioEnv(t, st, "tenantbudget", env("alice", "member"), noSteps(t))
	if member["status"] != float64(404) {
		t.Errorf("the member's request for the tenant's budget: %v", member["status"])
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	must(t, st.ControlPlane.Budget.Flush(fctx))
	rep, err := st.ControlPlane.Budget.Report(ctx, budget.ReportQuery{Tenant: roles.DevTenant, By: []budget.Dimension{budget.ByUser}})
	must(t, err)
	if len(rep.Rows) != 1 || rep.Rows[0].Key[0] != "alice" || rep.Rows[0].Cost <= 0 {
		t.Fatalf("the ledger after alice's turn: %+v", rep.Rows)
	}
	spent := rep.Rows[0]
	usd := func(m budget.Money) string { return strings.TrimPrefix(m.String(), "$") }

	admin := runScenarioEnv(t, st, "tenantbudget", env("carol", "admin"), noSteps(t))
	limits, _ := admin["limits"].([]any)
	got := map[string]map[string]any{}
	for _, l := range limits {
		m, _ := l.(map[string]any)
		got[fmt.Sprint(m["subject"], " ", m["kind"])] = m
	}
	for _, key := range []string{roles.DevTenant + " spend_per_day", "alice spend_per_day"} {
		l := got[key]
		if l == nil || l["withheld"] != "0" || l["used"] != usd(spent.Cost) {
			t.Errorf("%s in the tenant's budget: %v, want %s used (all: %v)", key, l, usd(spent.Cost), limits)
		}
	}
	if l := got["carol "]; l == nil {
		t.Errorf("carol, a member without limits of her own, is not listed: %v", limits)
	}
	usage, _ := admin["usage"].([]any)
	if len(usage) != 1 {
		t.Fatalf("the tenant's spend: %v", usage)
	}
	u, _ := usage[0].(map[string]any)
	tokensUsed := spent.InputTokens + spent.CacheWrite5mTokens + spent.CacheWrite1hTokens + spent.CacheReadTokens + spent.OutputTokens
	if u["user"] != "alice" || u["cost"] != usd(spent.Cost) || u["calls"] != fmt.Sprint(spent.Requests) || u["tokens"] != fmt.Sprint(tokensUsed) {
		t.Errorf("alice's spend as the page shows it: %v; the ledger: %s, %d calls, %d tokens", u, usd(spent.Cost), spent.Requests, tokensUsed)
	}
}
