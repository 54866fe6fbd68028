package admincmd

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/roles/rolestest"
)

// openBudgetStore opens the SQLite database of a data directory as a
// budget store, to seed the ledger as the gateway would have.
func openBudgetStore(t *testing.T, dir string) budget.Store {
	t.Helper()
	return openTestStore(t, dir).(budget.Store)
}

func seedLedger(t *testing.T, st budget.Store, es ...budget.Entry) {
	t.Helper()
	for _, e := range es {
		if _, err := st.SettleBudget(t.Context(), e); err != nil {
			t.Fatal(err)
		}
	}
}

func entry(id, user, tenant, env, conv, model string, u budget.Usage, cost budget.Money, at time.Time) budget.Entry {
	u.Model = model
	return budget.Entry{ID: id, Tenant: tenant, Env: env, User: user, Conversation: conv, Usage: u,
		Cost: cost, Status: 200, StartedAt: at.Add(-time.Second), SettledAt: at}
}

// updated hides the UPDATED column's times, which are the clock's.
var updated = regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ`)

func TestAdminBudgetCommands(t *testing.T) {
	dir, _ := rolestest.NewControlPlaneDir(t)
	d := "--data-dir=" + dir

	out, _ := mustAdmin(t, "budget", "set", d, "--user", "alice", "--kind", "daily", "--amount", "5.00", "--hard")
	if !strings.HasPrefix(out, "set user alice: spend_per_day $5.00 (hard)\n") {
		t.Errorf("budget set printed %q", out)
	}
	mustAdmin(t, "budget", "set", d, "--user", "alice", "--kind", "rolling-5h", "--amount", "$1.5")
	mustAdmin(t, "budget", "set", d, "--tenant", "acme", "--kind", "rpm", "--amount", "600")
	mustAdmin(t, "budget", "set", d, "--tenant", "acme", "--env", "prod", "--kind", "tokens-per-day", "--amount", "2000000")
	mustAdmin(t, "budget", "set", d, "--tenant", "acme", "--env", "prod", "--kind", "concurrency", "--amount", "8")
	mustAdmin(t, "budget", "set", d, "--tenant", "acme", "--env", "prod", "--kind", "concurrency", "--amount", "4") // replaces

	out, _ = mustAdmin(t, "budget", "get", d)
	want := `SCOPE   SUBJECT    KIND                     LIMIT  HARD  UPDATED
env     acme/prod  tokens_per_day       2,000,000  -     T
env     acme/prod  concurrent_requests          4  -     T
tenant  acme       requests_per_minute        600  -     T
user    alice      spend_per_5h             $1.50  -     T
user    alice      spend_per_day            $5.00  yes   T
`
	if diff := cmp.Diff(want, updated.ReplaceAllString(out, "T")); diff != "" {
		t.Errorf("budget get (-want +got):\n%s", diff)
	}
	out, _ = mustAdmin(t, "budget", "get", d, "--tenant", "acme")
	if strings.Count(out, "\n") != 2 || !strings.Contains(out, "requests_per_minute") {
		t.Errorf("budget get --tenant acme:\n%s", out)
	}
	out, _ = mustAdmin(t, "budget", "get", d, "--user", "nobody")
	if out != "no limits for user nobody\n" {
		t.Errorf("budget get --user nobody: %q", out)
	}

	out, _ = mustAdmin(t, "budget", "status", d, "--tenant", "acme", "--env", "prod")
	if !strings.HasPrefix(out, "env acme/prod at ") || !strings.Contains(out, "spent today $0.00 (0 calls); this month $0.00 (0 calls)") ||
		!regexp.MustCompile(`(?m)^concurrent_requests\s+-\s+4\s+-\s+0\s+4\s+now$`).MatchString(out) {
		t.Errorf("budget status:\n%s", out)
	}
	out, _ = mustAdmin(t, "budget", "status", d, "--user", "bob")
	if !strings.Contains(out, "no limits for user bob") {
		t.Errorf("budget status of a user without limits:\n%s", out)
	}

	out, _ = mustAdmin(t, "budget", "delete", d, "--user", "alice", "--kind", "spend_per_5h")
	if out != "deleted the spend_per_5h limit of user alice\n" {
		t.Errorf("budget delete printed %q", out)
	}
	out, _ = mustAdmin(t, "budget", "delete", d, "--user", "alice", "--kind", "5h")
	if out != "user alice has no spend_per_5h limit; nothing deleted\n" {
		t.Errorf("budget delete again printed %q", out)
	}

	for name, args := range map[string][]string{
		"no subject":         {"budget", "set", d, "--kind", "daily", "--amount", "1"},
		"two subjects":       {"budget", "set", d, "--user", "a", "--tenant", "b", "--kind", "daily", "--amount", "1"},
		"env without tenant": {"budget", "status", d, "--env", "prod"},
		"bad user":           {"budget", "get", d, "--user", "../x"},
		"no kind":            {"budget", "set", d, "--user", "a", "--amount", "1"},
		"bad kind":           {"budget", "set", d, "--user", "a", "--kind", "hourly", "--amount", "1"},
		"bad amount":         {"budget", "set", d, "--user", "a", "--kind", "daily", "--amount", "five"},
		"count amount":       {"budget", "set", d, "--user", "a", "--kind", "rpm", "--amount", "1.5"},
		"hard rpm":           {"budget", "set", d, "--user", "a", "--kind", "rpm", "--amount", "5", "--hard"},
		"delete no kind":     {"budget", "delete", d, "--user", "a"},
		"stray argument":     {"budget", "get", d, "alice"},
		"usage bad by":       {"usage", d, "--by", "week"},
		"usage bad from":     {"usage", d, "--from", "yesterday"},
		"usage env alone":    {"usage", d, "--env", "prod"},
		"usage bad model":    {"usage", d, "--model", "a b"},
		"wrong data dir":     {"budget", "get", "--data-dir", t.TempDir()},
	} {
		if out, _, err := admin(t, args...); err == nil {
			t.Errorf("%s: no error; printed %q", name, out)
		}
	}
	ls, err := openBudgetStore(t, dir).BudgetLimits(t.Context(), budget.User("a"))
	if err != nil || len(ls) != 0 {
		t.Errorf("refused commands stored limits: %v %v", ls, err)
	}
}

func TestAdminUsageTable(t *testing.T) {
	dir, _ := rolestest.NewControlPlaneDir(t)
	d := "--data-dir=" + dir
	day := func(n, h int) time.Time { return time.Date(2026, 11, n, h, 0, 0, 0, time.UTC) }
	failed := entry("e3", "bob", "acme", "dev", "c3", "claude-haiku-4-5", budget.Usage{InputTokens: 1, OutputTokens: 1}, 400, day(2, 9))
	failed.Status, failed.Estimated = 529, true
	seedLedger(t, openBudgetStore(t, dir),
		entry("e1", "alice", "acme", "prod", "c1", "claude-sonnet-4-6",
			budget.Usage{InputTokens: 1_234_567, OutputTokens: 89_012, CacheWrite5mTokens: 1000, CacheReadTokens: 500_000}, 12_345_678_901, day(30, 10)),
		entry("e2", "bob", "acme", "dev", "c2", "claude-haiku-4-5", budget.Usage{InputTokens: 10, OutputTokens: 5, CacheWrite1hTokens: 20}, 17_385_000, day(29, 8)),
		failed,
		entry("e4", "carol", "globex", "dev", "c4", "claude-sonnet-4-6", budget.Usage{InputTokens: 1}, budget.Dollar, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)),
	)

	out, _ := mustAdmin(t, "usage", d, "--by", "user", "--from", "2026-11-01", "--to", "2026-11-30")
	want := `usage by user, settled from 2026-11-01 00:00:00Z to 2026-12-01 00:00:00Z

USER   CALLS      INPUT  CACHE WRITE  CACHE READ  OUTPUT        COST
alice      1  1,234,567        1,000     500,000  89,012  $12.345679
bob        2         11           20           0       6   $0.017385
TOTAL      3  1,234,578        1,020     500,000  89,018  $12.363064

failed or unanswered calls: 1 (charged what the upstream billed); charged partly on an estimate: 1 (docs/budgets.md)
`
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("usage --by user (-want +got):\n%s", diff)
	}

	out, _ = mustAdmin(t, "usage", d, "--by", "env,day", "--from", "2026-11-01", "--to", "2026-12-31", "--tenant", "acme", "--limit", "2")
	want = `usage by env, day, settled from 2026-11-01 00:00:00Z to 2027-01-01 00:00:00Z, tenant acme

ENV       DAY         CALLS      INPUT  CACHE WRITE  CACHE READ  OUTPUT        COST
acme/dev  2026-11-02      1          1            0           0       1  <$0.000001
acme/dev  2026-11-29      1         10           20           0       5   $0.017385
(1 more)
TOTAL                     3  1,234,578        1,020     500,000  89,018  $12.363064

failed or unanswered calls: 1 (charged what the upstream billed); charged partly on an estimate: 1 (docs/budgets.md)
`
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("usage --by env,day (-want +got):\n%s", diff)
	}

	out, _ = mustAdmin(t, "usage", d, "--by", "model", "--from", "2026-10-01", "--to", "2026-10-31")
	if out != "usage by model, settled from 2026-10-01 00:00:00Z to 2026-11-01 00:00:00Z\nno calls\n" {
		t.Errorf("an empty report: %q", out)
	}
}

func TestBudgetStatusTable(t *testing.T) {
	dir, _ := rolestest.NewControlPlaneDir(t)
	st := openBudgetStore(t, dir)
	now := time.Date(2026, 11, 30, 16, 0, 0, 0, time.UTC)
	svc := budget.New(st, budget.DefaultPrices(), &budget.Options{Now: func() time.Time { return now }})
	defer svc.Close(context.Background())
	for _, l := range []budget.Limit{
		{Subject: budget.User("alice"), Kind: budget.SpendPerDay, Max: int64(5 * budget.Dollar), Hard: true},
		{Subject: budget.User("alice"), Kind: budget.SpendPer5h, Max: int64(2 * budget.Dollar)},
		{Subject: budget.User("alice"), Kind: budget.SpendPerMonth, Max: int64(1000 * budget.Dollar)},
		{Subject: budget.User("alice"), Kind: budget.RequestsPerMinute, Max: 60},
		{Subject: budget.User("alice"), Kind: budget.TokensPerDay, Max: 5_000_000},
		{Subject: budget.User("alice"), Kind: budget.Concurrent, Max: 4},
	} {
		if err := svc.SetLimit(t.Context(), l); err != nil {
			t.Fatal(err)
		}
	}
	seedLedger(t, st,
		entry("e1", "alice", "acme", "prod", "c1", "claude-sonnet-4-6", budget.Usage{InputTokens: 1_000_000, OutputTokens: 20_000}, 3_300_000_000, now.Add(-time.Hour)),
		entry("e2", "alice", "acme", "prod", "c1", "claude-sonnet-4-6", budget.Usage{InputTokens: 10_000}, 30_000_000, now.AddDate(0, 0, -2)),
	)
	if err := st.ReserveBudget(t.Context(), budget.Reservation{ID: "inflight", User: "alice", Tenant: "acme", Env: "prod",
		Cost: 123_456_789, Tokens: 4000, CreatedAt: now, ExpiresAt: now.Add(time.Minute)},
		budget.SnapshotQuery{Subjects: []budget.Subject{budget.User("alice")}, Now: now},
		func(*budget.Snapshot, *budget.Reservation) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := writeBudgetStatus(t.Context(), &out, svc, budget.User("alice"), now); err != nil {
		t.Fatal(err)
	}
	want := `user alice at 2026-11-30 16:00:00Z
spent today $3.30 (1 call); this month $3.33 (2 calls)

KIND                 HARD      LIMIT       USED       HELD    REMAINING  RESETS
spend_per_5h         -         $2.00      $3.30  $0.123457        $0.00  rolling 5 h
spend_per_day        yes       $5.00      $3.30  $0.123457    $1.576543  2026-12-01 00:00:00Z
spend_per_month      -     $1,000.00      $3.33  $0.123457  $996.546543  2026-12-01 00:00:00Z
tokens_per_day       -     5,000,000  1,020,000      4,000    3,976,000  2026-12-01 00:00:00Z
requests_per_minute  -            60          1          -           59  2026-11-30 16:01:00Z
concurrent_requests  -             4          -          1            3  now
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("budget status (-want +got):\n%s", diff)
	}
}
