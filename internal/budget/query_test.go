package budget_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/contract"
)

func TestReportRequestQuery(t *testing.T) {
	now := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)
	q, err := budget.ReportRequest{By: "tenant,day", From: "2026-11-01", To: "2026-11-10", Tenant: "acme", Env: "prod",
		Model: "claude-3-5-haiku@20241022", Order: "key"}.Query(now)
	if err != nil {
		t.Fatal(err)
	}
	want := budget.ReportQuery{By: []budget.Dimension{budget.ByTenant, budget.ByDay}, Tenant: "acme", Env: "prod",
		Model: "claude-3-5-haiku@20241022", Order: budget.OrderKey,
		From: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 11, 11, 0, 0, 0, 0, time.UTC)}
	if diff := cmp.Diff(want, q); diff != "" {
		t.Errorf("query (-want +got):\n%s", diff)
	}

	tests := map[string]struct {
		req   budget.ReportRequest
		field string
	}{
		"bad dimension": {budget.ReportRequest{By: "week"}, "by"},
		"twice":         {budget.ReportRequest{By: "day,day"}, "by"},
		"bad from":      {budget.ReportRequest{From: "yesterday"}, "from"},
		"backwards":     {budget.ReportRequest{From: "2026-11-10", To: "2026-11-01"}, "to"},
		"bad user":      {budget.ReportRequest{User: "../x"}, "user"},
		"env alone":     {budget.ReportRequest{Env: "prod"}, "env"},
		"bad model":     {budget.ReportRequest{Model: "two words"}, "model"},
		"bad order":     {budget.ReportRequest{Order: "size"}, "order"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := tc.req.Query(now)
			fe, ok := errors.AsType[*contract.FieldError](err)
			if !ok || fe.Field != tc.field {
				t.Fatalf("Query() = %v, want a FieldError about %s", err, tc.field)
			}
		})
	}
}

func TestReportQueryFor(t *testing.T) {
	for sub, want := range map[budget.Subject]budget.ReportQuery{
		budget.User("alice"):       {User: "alice"},
		budget.Tenant("acme"):      {Tenant: "acme"},
		budget.Env("acme", "prod"): {Tenant: "acme", Env: "prod"},
	} {
		if diff := cmp.Diff(want, budget.ReportQueryFor(sub)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", sub, diff)
		}
	}
}
