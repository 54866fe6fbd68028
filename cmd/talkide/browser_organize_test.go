package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/budget"
)

// TestBrowserOrganize: rename and archive round trip in the browser, by
// keyboard, and the running mark of a conversation that is not open; the
// store holds what the page showed.
func TestBrowserOrganize(t *testing.T) {
	browserReady(t)
	st, _ := startTestStack(t)
	res := runScenario(t, st, "organize", noSteps(t))
	id, _ := res["conversation"].(string)
	c, err := st.cp.store.GetConversation(t.Context(), id)
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
	browserReady(t)
	st, _ := startTestStack(t)
	limit := 5 * budget.Dollar
	if err := st.cp.budget.SetLimit(t.Context(), budget.Limit{Subject: budget.User(devUser), Kind: budget.SpendPerDay, Max: int64(limit)}); err != nil {
		t.Fatal(err)
	}
	res := runScenario(t, st, "budget", noSteps(t))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := st.cp.budget.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ls, err := st.cp.budget.Status(ctx, budget.User(devUser))
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
