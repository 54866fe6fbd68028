package storetest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/store"
)

// walkReports pages through what q selects, limit rows a page, and returns
// each report as tenant/env/key, with how many pages it took.
func walkReports(t *testing.T, s store.Store, q store.PageQuery) ([]string, int) {
	t.Helper()
	var out []string
	for pages := 1; ; pages++ {
		p, err := s.ListReportPage(t.Context(), q)
		must(t, err)
		if len(p.Reports) > q.Limit {
			t.Fatalf("a page of %d reports, limit %d", len(p.Reports), q.Limit)
		}
		out = append(out, keys(p.Reports)...)
		if p.Next == nil {
			return out, pages
		}
		if pages > 100 {
			t.Fatal("paging does not end")
		}
		q.Before = p.Next
	}
}

// testReportPages: pages newest first by time, then env and key
// descending as bytes; filters by env, conversation and kind; nothing of
// another tenant; a page of exactly the rest says no more follow.
func testReportPages(t *testing.T, s store.Store) {
	ctx := t.Context()
	// Three at one millisecond, in two envs, keys that order differently
	// as bytes and in a natural collation.
	prod := []contract.Report{report("a", "c1", 0), report("B", "c1", 0), report("b", "c2", time.Minute), report("c", "c1", 2*time.Minute)}
	prod[3].Kind, prod[3].Activity, prod[3].Tool = contract.ReportToolUse, "", &contract.ToolReport{ID: "toolu_1", Name: "Bash", DurationMS: 3}
	_, _, err := s.AddReports(ctx, "acme", "prod", prod, at(time.Hour))
	must(t, err)
	_, _, err = s.AddReports(ctx, "acme", "dev", []contract.Report{report("a", "c3", 0)}, at(time.Hour))
	must(t, err)
	_, _, err = s.AddReports(ctx, "globex", "prod", []contract.Report{report("z", "c9", 3*time.Minute)}, at(time.Hour))
	must(t, err)

	all := []string{"acme/prod/c", "acme/prod/b", "acme/prod/a", "acme/prod/B", "acme/dev/a"}
	for limit := 1; limit <= 6; limit++ {
		got, pages := walkReports(t, s, store.PageQuery{Tenant: "acme", Limit: limit})
		if !slices.Equal(got, all) {
			t.Errorf("limit %d: %v, want %v", limit, got, all)
		}
		if want := (len(all) + limit - 1) / limit; pages != want {
			t.Errorf("limit %d: %d pages, want %d", limit, pages, want)
		}
	}
	for name, c := range map[string]struct {
		q    store.PageQuery
		want []string
	}{
		"env":                            {store.PageQuery{Tenant: "acme", Env: "dev", Limit: 2}, []string{"acme/dev/a"}},
		"conversation":                   {store.PageQuery{Tenant: "acme", ConversationID: "c1", Limit: 2}, []string{"acme/prod/c", "acme/prod/a", "acme/prod/B"}},
		"kind":                           {store.PageQuery{Tenant: "acme", Kind: contract.ReportToolUse, Limit: 2}, []string{"acme/prod/c"}},
		"activity":                       {store.PageQuery{Tenant: "acme", Env: "prod", Kind: contract.ReportActivity, Limit: 2}, []string{"acme/prod/b", "acme/prod/a", "acme/prod/B"}},
		"other tenant":                   {store.PageQuery{Tenant: "globex", Limit: 2}, []string{"globex/prod/z"}},
		"conversation of another tenant": {store.PageQuery{Tenant: "acme", ConversationID: "c9", Limit: 2}, nil},
		"unknown tenant":                 {store.PageQuery{Tenant: "nope", Limit: 2}, nil},
	} {
		if got, _ := walkReports(t, s, c.q); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
	p, err := s.ListReportPage(ctx, store.PageQuery{Tenant: "acme", Kind: contract.ReportToolUse, Limit: 1})
	must(t, err)
	if len(p.Reports) != 1 || p.Reports[0].Report.Tool == nil || p.Reports[0].Report.Tool.Name != "Bash" || !p.Reports[0].Report.Time.Equal(ms(at(2*time.Minute))) || p.Next != nil {
		t.Errorf("the tool report's page: %+v", p)
	}
	checkUTC(t, "report page", p.Reports[0].Report.Time, p.Reports[0].ReceivedAt)
	if _, err := s.ListReportPage(ctx, store.PageQuery{Limit: 1}); err == nil {
		t.Error("a page without a tenant: no error")
	}
	if _, err := s.ListReportPage(ctx, store.PageQuery{Tenant: "acme"}); err == nil {
		t.Error("a page without a limit: no error")
	}
}

// testUsagePages: as testReportPages, for usage records.
func testUsagePages(t *testing.T, s store.Store) {
	ctx := t.Context()
	var us []store.UsageRecord
	for i, id := range []string{"u-a", "u-B", "u-b", "u-c"} {
		u := usage(id, "c1", time.Duration(i/2)*time.Minute)
		if id == "u-c" {
			u.Env, u.ConversationID = "dev", "c2"
		}
		us = append(us, u)
	}
	other := usage("u-z", "c9", time.Hour)
	other.Tenant = "globex"
	must(t, s.RecordUsages(ctx, append(us, other)))
	walk := func(q store.PageQuery) []string {
		var out []string
		for range 100 {
			p, err := s.ListUsagePage(ctx, q)
			must(t, err)
			for _, u := range p.Usage {
				out = append(out, u.Env+"/"+u.ID)
			}
			if p.Next == nil {
				return out
			}
			q.Before = p.Next
		}
		t.Fatal("paging does not end")
		return nil
	}
	// u-b and u-c at one millisecond: prod after dev descending.
	want := []string{"prod/u-b", "dev/u-c", "prod/u-a", "prod/u-B"}
	for limit := 1; limit <= 5; limit++ {
		if got := walk(store.PageQuery{Tenant: "acme", Limit: limit}); !slices.Equal(got, want) {
			t.Errorf("limit %d: %v, want %v", limit, got, want)
		}
	}
	if got := walk(store.PageQuery{Tenant: "acme", Env: "prod", ConversationID: "c1", Limit: 2}); strings.Join(got, " ") != "prod/u-b prod/u-a prod/u-B" {
		t.Errorf("one conversation: %v", got)
	}
	if got := walk(store.PageQuery{Tenant: "globex", Limit: 2}); strings.Join(got, " ") != "prod/u-z" {
		t.Errorf("other tenant: %v", got)
	}
	p, err := s.ListUsagePage(ctx, store.PageQuery{Tenant: "acme", Env: "dev", Limit: 5})
	must(t, err)
	if len(p.Usage) != 1 || p.Usage[0] != storedUsage(us[3]) {
		t.Errorf("usage round trip: %+v, want %+v", p.Usage, storedUsage(us[3]))
	}
}
