package budget_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/budget"
)

// ledgerEntry is a settled call for the report tests.
func ledgerEntry(id, tenant, env, user, conv, model string, cost budget.Money, at time.Time) budget.Entry {
	return budget.Entry{
		ID: id, Tenant: tenant, Env: env, User: user, Conversation: conv,
		Usage: budget.Usage{Model: model, InputTokens: 100, OutputTokens: 10, CacheWrite5mTokens: 5, CacheWrite1hTokens: 1, CacheReadTokens: 50},
		Cost:  cost, Status: 200, Streamed: true, StartedAt: at.Add(-time.Second), SettledAt: at,
	}
}

func (e *env) settle(t *testing.T, es ...budget.Entry) {
	t.Helper()
	for _, en := range es {
		if _, err := e.store.SettleBudget(t.Context(), en); err != nil {
			t.Fatal(err)
		}
	}
}

// tot is the totals of n entries made by ledgerEntry costing cost in all.
func tot(n int64, cost budget.Money) budget.Totals {
	return budget.Totals{Requests: n, InputTokens: 100 * n, OutputTokens: 10 * n, CacheWrite5mTokens: 5 * n,
		CacheWrite1hTokens: n, CacheReadTokens: 50 * n, Cost: cost}
}

func TestReport(t *testing.T) {
	e := newEnv(t, budget.Options{})
	day1 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	day2 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	failed := ledgerEntry("e5", "acme", "prod", "u1", "c2", "haiku", 5*budget.Cent, day2.Add(time.Hour))
	failed.Status, failed.Estimated = 529, true
	e.settle(t,
		ledgerEntry("e1", "acme", "prod", "u1", "c1", "sonnet", 1*budget.Dollar, day1),
		ledgerEntry("e2", "acme", "prod", "u1", "c1", "sonnet", 2*budget.Dollar, day2),
		ledgerEntry("e3", "acme", "dev", "u2", "c3", "sonnet", 50*budget.Cent, day2),
		ledgerEntry("e4", "globex", "prod", "u3", "c4", "haiku", 3*budget.Dollar, day1),
		failed,
		ledgerEntry("e6", "acme", "prod", "u1", "c1", "sonnet", 7*budget.Dollar, day1.AddDate(0, -1, 0)), // last month
	)
	from := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	// withFailed is tot(n, cost) with u1's failed call (e5) counted in:
	// one more call of the same tokens, 5 cents, failed and estimated.
	withFailed := func(n int64, cost budget.Money) budget.Totals {
		t := tot(n+1, cost+5*budget.Cent)
		t.Failed, t.Estimated = 1, 1
		return t
	}
	all := withFailed(4, 650*budget.Cent)

	tests := map[string]struct {
		q       budget.ReportQuery
		rows    []budget.ReportRow
		total   budget.Totals
		omitted int
	}{
		"by user, by cost": {
			q: budget.ReportQuery{By: []budget.Dimension{budget.ByUser}, From: from},
			rows: []budget.ReportRow{
				{Key: []string{"u1"}, Totals: withFailed(2, 3*budget.Dollar)},
				{Key: []string{"u3"}, Totals: tot(1, 3*budget.Dollar)},
				{Key: []string{"u2"}, Totals: tot(1, 50*budget.Cent)},
			},
			total: all,
		},
		"by env and day, by key": {
			q: budget.ReportQuery{By: []budget.Dimension{budget.ByEnv, budget.ByDay}, From: from},
			rows: []budget.ReportRow{
				{Key: []string{"acme/dev", "2026-11-30"}, Totals: tot(1, 50*budget.Cent)},
				{Key: []string{"acme/prod", "2026-11-29"}, Totals: tot(1, budget.Dollar)},
				{Key: []string{"acme/prod", "2026-11-30"}, Totals: withFailed(1, 2*budget.Dollar)},
				{Key: []string{"globex/prod", "2026-11-29"}, Totals: tot(1, 3*budget.Dollar)},
			},
			total: all,
		},
		"by model, one tenant-env": {
			q: budget.ReportQuery{By: []budget.Dimension{budget.ByModel}, Tenant: "acme", Env: "prod", From: from},
			rows: []budget.ReportRow{
				{Key: []string{"sonnet"}, Totals: tot(2, 3*budget.Dollar)},
				{Key: []string{"haiku"}, Totals: withFailed(0, 0)},
			},
			total: withFailed(2, 3*budget.Dollar),
		},
		"by conversation, one model, one day": {
			q: budget.ReportQuery{By: []budget.Dimension{budget.ByConversation}, Model: "sonnet",
				From: day2.Truncate(24 * time.Hour), To: day2.Truncate(24*time.Hour).AddDate(0, 0, 1)},
			rows: []budget.ReportRow{
				{Key: []string{"c1"}, Totals: tot(1, 2*budget.Dollar)},
				{Key: []string{"c3"}, Totals: tot(1, 50*budget.Cent)},
			},
			total: tot(2, 250*budget.Cent),
		},
		"by tenant, everything, key order, one row": {
			q: budget.ReportQuery{By: []budget.Dimension{budget.ByTenant}, Order: budget.OrderKey, MaxRows: 1},
			rows: []budget.ReportRow{
				{Key: []string{"acme"}, Totals: withFailed(4, 1050*budget.Cent)},
			},
			total:   withFailed(5, 1350*budget.Cent),
			omitted: 1,
		},
		"total only, one user": {
			q:     budget.ReportQuery{User: "u2"},
			rows:  []budget.ReportRow{{Key: []string{}, Totals: tot(1, 50*budget.Cent)}},
			total: tot(1, 50*budget.Cent),
		},
		"nothing": {
			q:    budget.ReportQuery{By: []budget.Dimension{budget.ByUser}, User: "nobody"},
			rows: []budget.ReportRow{},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rep, err := e.svc.Report(t.Context(), tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.rows, rep.Rows); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.total, rep.Total); diff != "" {
				t.Errorf("total (-want +got):\n%s", diff)
			}
			if rep.Omitted != tc.omitted {
				t.Errorf("omitted = %d, want %d", rep.Omitted, tc.omitted)
			}
		})
	}

	for name, q := range map[string]budget.ReportQuery{
		"env without tenant": {Env: "prod"},
		"empty range":        {From: day2, To: day2},
		"bad dimension":      {By: []budget.Dimension{"week"}},
		"bad order":          {Order: "size"},
	} {
		if _, err := e.svc.Report(t.Context(), q); !errors.Is(err, budget.ErrInvalidReport) {
			t.Errorf("%s: err = %v, want ErrInvalidReport", name, err)
		}
	}
}

// TestReportPaging: a report reads the ledger a page at a time and counts
// every entry once, also when many were settled in the same millisecond,
// more than a page of them.
func TestReportPaging(t *testing.T) {
	budget.SetReportPage(t, 3)
	e := newEnv(t, budget.Options{})
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	var (
		n    int
		want budget.Money
	)
	// Groups of entries sharing a millisecond: 1, 2, 3 (a page), 4, 8.
	for g, size := range []int{1, 2, 3, 4, 8, 1} {
		for range size {
			n++
			cost := budget.Money(n) * budget.Microdollar
			want += cost
			e.settle(t, ledgerEntry(fmt.Sprintf("e%02d", n), "acme", "prod", "u1", "c1", "m", cost, at.Add(time.Duration(g)*time.Millisecond)))
		}
	}
	rep, err := e.svc.Report(t.Context(), budget.ReportQuery{By: []budget.Dimension{budget.ByDay}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total.Requests != int64(n) || rep.Total.Cost != want || len(rep.Rows) != 1 {
		t.Errorf("report of %d entries costing %s: %d rows, total %d entries costing %s", n, want, len(rep.Rows), rep.Total.Requests, rep.Total.Cost)
	}
}

func TestParseKind(t *testing.T) {
	for in, want := range map[string]budget.Kind{
		"daily": budget.SpendPerDay, "Weekly": budget.SpendPerWeek, "monthly": budget.SpendPerMonth,
		"rolling-5h": budget.SpendPer5h, "5h": budget.SpendPer5h, "rpm": budget.RequestsPerMinute,
		"tokens-per-day": budget.TokensPerDay, "tokens/day": budget.TokensPerDay, "concurrency": budget.Concurrent,
		"spend_per_day": budget.SpendPerDay, "concurrent-requests": budget.Concurrent,
	} {
		if got, err := budget.ParseKind(in); err != nil || got != want {
			t.Errorf("ParseKind(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "hourly", "spend", "yearly"} {
		if _, err := budget.ParseKind(in); !errors.Is(err, budget.ErrInvalidLimit) {
			t.Errorf("ParseKind(%q): err = %v, want ErrInvalidLimit", in, err)
		}
	}
}

func TestParseAmount(t *testing.T) {
	ok := []struct {
		k    budget.Kind
		in   string
		want int64
	}{
		{budget.SpendPerDay, "5.00", int64(5 * budget.Dollar)},
		{budget.SpendPerDay, "$0.000001", int64(budget.Microdollar)},
		{budget.SpendPer5h, "0", 0},
		{budget.RequestsPerMinute, "60", 60},
		{budget.TokensPerDay, "1000000", 1_000_000},
	}
	for _, tc := range ok {
		if got, err := budget.ParseAmount(tc.k, tc.in); err != nil || got != tc.want {
			t.Errorf("ParseAmount(%s, %q) = %d, %v; want %d", tc.k, tc.in, got, err, tc.want)
		}
	}
	bad := []struct {
		k  budget.Kind
		in string
	}{
		{budget.SpendPerDay, "-1"}, {budget.SpendPerDay, "five"}, {budget.SpendPerDay, "1e3"},
		{budget.RequestsPerMinute, "1.5"}, {budget.RequestsPerMinute, "-3"}, {budget.Concurrent, "$2"},
		{budget.TokensPerDay, "99999999999999999999"},
	}
	for _, tc := range bad {
		if _, err := budget.ParseAmount(tc.k, tc.in); !errors.Is(err, budget.ErrInvalidLimit) {
			t.Errorf("ParseAmount(%s, %q): err = %v, want ErrInvalidLimit", tc.k, tc.in, err)
		}
	}
}

func TestParseDimensions(t *testing.T) {
	got, err := budget.ParseDimensions("tenant, Day")
	if err != nil || !cmp.Equal(got, []budget.Dimension{budget.ByTenant, budget.ByDay}) {
		t.Errorf("ParseDimensions = %v, %v", got, err)
	}
	for _, in := range []string{"", "week", "user,user", "user,"} {
		if _, err := budget.ParseDimensions(in); !errors.Is(err, budget.ErrInvalidReport) {
			t.Errorf("ParseDimensions(%q): err = %v", in, err)
		}
	}
}

func TestParseReportRange(t *testing.T) {
	now := time.Date(2026, 11, 30, 16, 30, 0, 0, time.UTC)
	d := func(y int, m time.Month, day int) time.Time { return time.Date(y, m, day, 0, 0, 0, 0, time.UTC) }
	tests := map[string]struct {
		from, to         string
		wantFrom, wantTo time.Time
	}{
		"defaults":      {wantFrom: d(2026, 11, 1)},
		"dates":         {from: "2026-10-01", to: "2026-10-31", wantFrom: d(2026, 10, 1), wantTo: d(2026, 11, 1)},
		"one day":       {from: "2026-11-30", to: "2026-11-30", wantFrom: d(2026, 11, 30), wantTo: d(2026, 12, 1)},
		"times":         {from: "2026-11-30T10:00:00+01:00", to: "2026-11-30T12:00:00Z", wantFrom: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), wantTo: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)},
		"from only, to": {to: "2026-11-15", wantFrom: d(2026, 11, 1), wantTo: d(2026, 11, 16)},
	}
	for name, tc := range tests {
		f, to, err := budget.ParseReportRange(tc.from, tc.to, now)
		if err != nil || !f.Equal(tc.wantFrom) || !to.Equal(tc.wantTo) {
			t.Errorf("%s: got %v – %v, %v; want %v – %v", name, f, to, err, tc.wantFrom, tc.wantTo)
		}
	}
	for name, r := range map[string][2]string{
		"bad from":     {"yesterday", ""},
		"bad to":       {"", "2026-13-01"},
		"to before":    {"2026-11-10", "2026-11-09T00:00:00Z"},
		"to = from":    {"2026-11-10T00:00:00Z", "2026-11-10T00:00:00Z"},
		"to < default": {"", "2026-10-01T00:00:00Z"},
	} {
		if _, _, err := budget.ParseReportRange(r[0], r[1], now); !errors.Is(err, budget.ErrInvalidReport) {
			t.Errorf("%s: err = %v, want ErrInvalidReport", name, err)
		}
	}
}

func TestCanonical(t *testing.T) {
	p := budget.DefaultPrices()
	for in, want := range map[string]string{
		"claude-sonnet-4-6":          "claude-sonnet-4-6",
		"claude-haiku-4-5-20251001":  "claude-haiku-4-5",
		"claude-unknown-9":           "",
		"claude-unknown-9-20251001":  "",
		"":                           "",
		"claude-sonnet-4-6-extended": "",
	} {
		got, known := p.Canonical(in)
		if got != want || known != (want != "") {
			t.Errorf("Canonical(%q) = %q, %v; want %q", in, got, known, want)
		}
	}
}

// TestSettledHook: Options.Settled sees each entry the service writes, once,
// and not one the ledger already held; Reservations counts the holds.
func TestSettledHook(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	e := newEnv(t, budget.Options{Settled: func(en budget.Entry) {
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s %s %s", en.ID, en.User, en.Cost))
		mu.Unlock()
	}})
	e.limit(t, budget.Limit{Subject: budget.User("u1"), Kind: budget.SpendPerDay, Max: int64(budget.Dollar)})

	c1, c2, c3 := call("u1"), call("u1"), call("u2") // u2 has no limit: no reservation
	h1, h2, h3 := e.reserve(t, c1), e.reserve(t, c2), e.reserve(t, c3)
	if n := e.svc.Reservations(); n != 2 {
		t.Errorf("Reservations = %d, want 2", n)
	}
	// c2's ledger row is there already (a retry of another process's
	// settlement): settling it charges nothing and is not reported.
	e.settle(t, ledgerEntry(c2.ID, "acme", "prod", "u1", "c1", "m", budget.Cent, e.clock.Now()))
	h1.Settle(settled(10))
	h2.Settle(settled(10))
	h3.Settle(settled(20))
	h1.Settle(settled(99)) // only the first counts
	e.flush(t)
	if n := e.svc.Reservations(); n != 0 {
		t.Errorf("Reservations after settling = %d, want 0", n)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{c1.ID + " u1 $0.00012", c3.ID + " u2 $0.00014"}
	if diff := cmp.Diff(want, seen, cmp.Transformer("sort", func(s []string) map[string]bool {
		m := map[string]bool{}
		for _, x := range s {
			m[x] = true
		}
		return m
	})); diff != "" || len(seen) != 2 {
		t.Errorf("settled (-want +got):\n%s", diff)
	}
}
