package admincmd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/store"
)

// talkide admin budget …, admin usage and admin operator-token: the
// operator's side of budgets, on the control-plane's database directly (no
// running control-plane needed). The HTTP operator API does the same for
// automation (internal/controlplane/admin.go).

// budgetLeaf is a storeLeaf whose body runs with a budget service on the
// control-plane's store.
func budgetLeaf(std cli.Stdio, use, short string, loc *cpLocation, check func() error, body func(ctx context.Context, svc *budget.Service, stdout, stderr io.Writer) error) *cobra.Command {
	return storeLeaf(std, use, short, loc, check, func(ctx context.Context, st store.Store, stdout, stderr io.Writer) error {
		bst, ok := st.(budget.Store)
		if !ok {
			return fmt.Errorf("the store %T keeps no budgets", st)
		}
		// Prices do not matter here: nothing is charged.
		svc := budget.New(bst, budget.DefaultPrices(), nil)
		defer func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			svc.Close(ctx)
		}()
		return body(ctx, svc, stdout, stderr)
	})
}

// subjectFlags name a budget subject: --user, or --tenant with or without
// --env.
type subjectFlags struct{ user, tenant, env string }

func (f *subjectFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.user, "user", "", "a user id: the limits of that user across tenants and envs")
	fs.StringVar(&f.tenant, "tenant", "", "a tenant: the limits of all its users together (with --env: of that tenant-env)")
	fs.StringVar(&f.env, "env", "", "an env of --tenant: the limits of all users of that tenant-env together")
}

// subject returns the subject named; ok is false when none is.
func (f *subjectFlags) subject() (sub budget.Subject, ok bool, err error) {
	switch {
	case f.user != "" && (f.tenant != "" || f.env != ""):
		return sub, false, errors.New("give either --user or --tenant [--env], not both")
	case f.env != "" && f.tenant == "":
		return sub, false, errors.New("--env needs --tenant: an env is named within its tenant")
	case f.user != "":
		if err := contract.ValidateID("user", f.user); err != nil {
			return sub, false, err
		}
		return budget.User(f.user), true, nil
	case f.tenant != "":
		if err := contract.ValidateID("tenant", f.tenant); err != nil {
			return sub, false, err
		}
		if f.env == "" {
			return budget.Tenant(f.tenant), true, nil
		}
		if err := contract.ValidateID("env", f.env); err != nil {
			return sub, false, err
		}
		return budget.Env(f.tenant, f.env), true, nil
	}
	return sub, false, nil
}

func (f *subjectFlags) required() (budget.Subject, error) {
	sub, ok, err := f.subject()
	if err == nil && !ok {
		err = errors.New("name the subject: --user U, --tenant T, or --tenant T --env E")
	}
	return sub, err
}

const kindHelp = "the kind of limit (required): daily, weekly, monthly, rolling-5h (spend in dollars), rpm (requests per minute), tokens-per-day, concurrency (calls in flight), or a full name such as spend_per_day"

func newAdminBudgetSetCmd(std cli.Stdio) *cobra.Command {
	var (
		loc          cpLocation
		sf           subjectFlags
		kind, amount string
		hard         bool
		sub          budget.Subject
		k            budget.Kind
		max          int64
	)
	cmd := budgetLeaf(std, "set", "Set a limit of a user, tenant or tenant-env", &loc, func() (err error) {
		if sub, err = sf.required(); err != nil {
			return err
		}
		if kind == "" || amount == "" {
			return errors.New("--kind and --amount are required")
		}
		if k, err = budget.ParseKind(kind); err != nil {
			return err
		}
		max, err = budget.ParseAmount(k, amount)
		return err
	}, func(ctx context.Context, svc *budget.Service, stdout, stderr io.Writer) error {
		l := budget.Limit{Subject: sub, Kind: k, Max: max, Hard: hard}
		if err := svc.SetLimit(ctx, l); err != nil {
			return err
		}
		note := ""
		if hard {
			note = " (hard)"
		}
		fmt.Fprintf(stdout, "set %s: %s %s%s\n", sub, k, k.Display(max), note)
		fmt.Fprintln(stdout, "running control-planes apply it within 5 seconds")
		return nil
	})
	fs := cmd.Flags()
	sf.add(fs)
	fs.StringVar(&kind, "kind", "", kindHelp)
	fs.StringVar(&amount, "amount", "", "the maximum (required): dollars for a spending limit (5.00), a whole number otherwise")
	fs.BoolVar(&hard, "hard", false, "for a spending limit: also cut streams off when it is reached mid-stream (docs/budgets.md)")
	return cmd
}

func newAdminBudgetGetCmd(std cli.Stdio) *cobra.Command {
	var (
		loc cpLocation
		sf  subjectFlags
		sub budget.Subject
		ok  bool
	)
	cmd := budgetLeaf(std, "get", "List limits (all of them without a subject)", &loc, func() (err error) {
		sub, ok, err = sf.subject()
		return err
	}, func(ctx context.Context, svc *budget.Service, stdout, stderr io.Writer) (err error) {
		var ls []budget.Limit
		if ok {
			ls, err = svc.Limits(ctx, sub)
		} else {
			ls, err = svc.Limits(ctx)
		}
		if err != nil {
			return err
		}
		if len(ls) == 0 {
			if ok {
				fmt.Fprintf(stdout, "no limits for %s\n", sub)
			} else {
				fmt.Fprintln(stdout, "no limits (set one: talkide admin budget set --user U --kind daily --amount 5.00)")
			}
			return nil
		}
		// By scope and subject, each subject's kinds as budget.Kinds lists them.
		slices.SortFunc(ls, func(a, b budget.Limit) int {
			return cmp.Or(cmp.Compare(a.Subject.Scope, b.Subject.Scope), cmp.Compare(a.Subject.ID, b.Subject.ID),
				a.Kind.Order()-b.Kind.Order())
		})
		t := cli.Table{Head: []string{"SCOPE", "SUBJECT", "KIND", "LIMIT", "HARD", "UPDATED"}, Right: []bool{3: true}}
		for _, l := range ls {
			t.Add(string(l.Subject.Scope), l.Subject.ID, string(l.Kind), l.Kind.Display(l.Max), yesNo(l.Hard), cli.FormatTime(l.UpdatedAt))
		}
		return t.Write(stdout)
	})
	fs := cmd.Flags()
	sf.add(fs)
	return cmd
}

func newAdminBudgetDeleteCmd(std cli.Stdio) *cobra.Command {
	var (
		loc  cpLocation
		sf   subjectFlags
		kind string
		sub  budget.Subject
		k    budget.Kind
	)
	cmd := budgetLeaf(std, "delete", "Delete a limit", &loc, func() (err error) {
		if sub, err = sf.required(); err != nil {
			return err
		}
		if kind == "" {
			return errors.New("--kind is required")
		}
		k, err = budget.ParseKind(kind)
		return err
	}, func(ctx context.Context, svc *budget.Service, stdout, stderr io.Writer) error {
		ls, err := svc.Limits(ctx, sub)
		if err != nil {
			return err
		}
		found := false
		for _, l := range ls {
			found = found || l.Kind == k
		}
		if !found {
			fmt.Fprintf(stdout, "%s has no %s limit; nothing deleted\n", sub, k)
			return nil
		}
		if err := svc.DeleteLimit(ctx, sub, k); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted the %s limit of %s\n", k, sub)
		return nil
	})
	fs := cmd.Flags()
	sf.add(fs)
	fs.StringVar(&kind, "kind", "", "the kind of limit to delete (required; as for budget set)")
	return cmd
}

func newAdminBudgetStatusCmd(std cli.Stdio) *cobra.Command {
	var (
		loc cpLocation
		sf  subjectFlags
		sub budget.Subject
	)
	cmd := budgetLeaf(std, "status", "Show used, held and remaining of each limit of a subject, and when it resets", &loc, func() (err error) {
		sub, err = sf.required()
		return err
	}, func(ctx context.Context, svc *budget.Service, stdout, stderr io.Writer) error {
		return writeBudgetStatus(ctx, stdout, svc, sub, time.Now())
	})
	fs := cmd.Flags()
	sf.add(fs)
	return cmd
}

// writeBudgetStatus prints where sub stands against its limits, and what it
// spent today and this month.
func writeBudgetStatus(ctx context.Context, w io.Writer, svc *budget.Service, sub budget.Subject, now time.Time) error {
	sts, err := svc.Status(ctx, sub)
	if err != nil {
		return err
	}
	q := budget.ReportQueryFor(sub)
	q.By = []budget.Dimension{budget.ByDay}
	q.From, _, _ = budget.ParseReportRange("", "", now)
	rep, err := svc.Report(ctx, q)
	if err != nil {
		return err
	}
	var today budget.Totals
	for _, r := range rep.Rows {
		if r.Key[0] == now.UTC().Format(time.DateOnly) {
			today = r.Totals
		}
	}
	fmt.Fprintf(w, "%s at %s\n", sub, cli.FormatTime(now))
	fmt.Fprintf(w, "spent today %s (%s); this month %s (%s)\n\n",
		today.Cost.Display(), calls(today.Requests), rep.Total.Cost.Display(), calls(rep.Total.Requests))
	if len(sts) == 0 {
		fmt.Fprintf(w, "no limits for %s: its calls are admitted and charged\n", sub)
		return nil
	}
	slices.SortStableFunc(sts, func(a, b budget.LimitStatus) int { return a.Kind.Order() - b.Kind.Order() })
	t := cli.Table{Head: []string{"KIND", "HARD", "LIMIT", "USED", "HELD", "REMAINING", "RESETS"},
		Right: []bool{2: true, 3: true, 4: true, 5: true}}
	for _, st := range sts {
		limit, used, held, rem := st.Displayed()
		usedS, heldS, resets := st.Kind.Display(used), st.Kind.Display(held), cli.FormatTime(st.Resets)
		switch st.Kind {
		case budget.Concurrent:
			usedS, resets = "-", "now"
		case budget.RequestsPerMinute:
			heldS = "-"
		case budget.SpendPer5h:
			resets = "rolling 5 h"
		}
		t.Add(string(st.Kind), yesNo(st.Hard), st.Kind.Display(limit), usedS, heldS, st.Kind.Display(rem), resets)
	}
	return t.Write(w)
}

func newAdminUsageReportCmd(std cli.Stdio) *cobra.Command {
	var (
		loc                                    cpLocation
		by, from, to, order                    string
		user, tenant, env, conversation, model string
		limit                                  int
		q                                      budget.ReportQuery
	)
	cmd := budgetLeaf(std, "usage", "Show usage and cost from the budget ledger, as a table", &loc, func() (err error) {
		q, err = budget.ReportRequest{
			By: by, From: from, To: to, User: user, Tenant: tenant, Env: env,
			Conversation: conversation, Model: model, Order: order,
		}.Query(time.Now())
		if err != nil {
			return err
		}
		if limit < 0 {
			return contract.Invalid(nil, "limit", "must not be negative")
		}
		q.MaxRows = limit
		return nil
	}, func(ctx context.Context, svc *budget.Service, stdout, stderr io.Writer) error {
		rep, err := svc.Report(ctx, q)
		if err != nil {
			return err
		}
		return writeUsage(stdout, rep)
	})
	fs := cmd.Flags()
	fs.StringVar(&by, "by", "user", "what to group by: user, tenant, env, conversation, model or day; several separated by commas (tenant,day)")
	fs.StringVar(&from, "from", "", "start: a date (2026-11-01, UTC) or an RFC 3339 time (default: the start of this month)")
	fs.StringVar(&to, "to", "", "end: a date (that day included) or an RFC 3339 time (excluded) (default: now)")
	fs.StringVar(&user, "user", "", "only this user's calls")
	fs.StringVar(&tenant, "tenant", "", "only this tenant's calls")
	fs.StringVar(&env, "env", "", "only this env's calls (with --tenant)")
	fs.StringVar(&conversation, "conversation", "", "only this conversation's calls")
	fs.StringVar(&model, "model", "", "only calls billed for this model")
	fs.StringVar(&order, "order", "", "row order: cost (highest first) or key (default: key when grouping by day, else cost)")
	fs.IntVar(&limit, "limit", 0, "print at most this many rows (the total still counts all); 0: all")
	return cmd
}

// writeUsage prints a usage report as a table with a total.
func writeUsage(w io.Writer, rep *budget.Report) error {
	q := rep.Query
	names := make([]string, len(q.By))
	for i, d := range q.By {
		names[i] = string(d)
	}
	end := "now"
	if !q.To.IsZero() {
		end = cli.FormatTime(q.To)
	}
	fmt.Fprintf(w, "usage by %s, settled from %s to %s", strings.Join(names, ", "), cli.FormatTime(q.From), end)
	for _, f := range []struct{ name, v string }{{"user", q.User}, {"tenant", q.Tenant}, {"env", q.Env}, {"conversation", q.Conversation}, {"model", q.Model}} {
		if f.v != "" {
			fmt.Fprintf(w, ", %s %s", f.name, f.v)
		}
	}
	fmt.Fprintln(w)
	if rep.Total.Requests == 0 {
		fmt.Fprintln(w, "no calls")
		return nil
	}
	fmt.Fprintln(w)
	t := cli.Table{}
	for _, n := range names {
		t.Head = append(t.Head, strings.ToUpper(n))
		t.Right = append(t.Right, false)
	}
	t.Head = append(t.Head, "CALLS", "INPUT", "CACHE WRITE", "CACHE READ", "OUTPUT", "COST")
	for range 6 {
		t.Right = append(t.Right, true)
	}
	cells := func(tot budget.Totals) []string {
		return []string{budget.FormatCount(tot.Requests), budget.FormatCount(tot.InputTokens),
			budget.FormatCount(tot.CacheWrite5mTokens + tot.CacheWrite1hTokens), budget.FormatCount(tot.CacheReadTokens),
			budget.FormatCount(tot.OutputTokens), tot.Cost.Display()}
	}
	for _, r := range rep.Rows {
		t.Add(append(append([]string(nil), r.Key...), cells(r.Totals)...)...)
	}
	if rep.Omitted > 0 {
		row := make([]string, len(names))
		row[0] = fmt.Sprintf("(%d more)", rep.Omitted)
		t.Add(append(row, make([]string, 6)...)...)
	}
	total := make([]string, len(names))
	total[0] = "TOTAL"
	t.Add(append(total, cells(rep.Total)...)...)
	if err := t.Write(w); err != nil {
		return err
	}
	if rep.Total.Failed > 0 || rep.Total.Estimated > 0 {
		fmt.Fprintf(w, "\nfailed or unanswered calls: %s (charged what the upstream billed); charged partly on an estimate: %s (docs/budgets.md)\n",
			budget.FormatCount(rep.Total.Failed), budget.FormatCount(rep.Total.Estimated))
	}
	return nil
}

// Operator tokens.

// operatorTokenFile returns the token file: --file, or operator-tokens in
// the data directory, which must be the control-plane's.
func operatorTokenFile(loc *cpLocation, file string) (string, error) {
	if file != "" {
		return file, nil
	}
	dir := roles.ControlPlaneDir(loc.dataDir)
	if _, err := os.Stat(dir.Secrets()); err != nil {
		return "", fmt.Errorf("%s is not a control-plane data directory (no controlplane-secrets.json; pass the right --data-dir, or --file): %w", loc.dataDir, err)
	}
	return dir.OperatorTokens(), nil
}

func newAdminOperatorIssueCmd(std cli.Stdio) *cobra.Command {
	var loc cpLocation
	var name, file string
	cmd := adminLeaf(std, "issue", "Issue a token for the operator API (/api/admin)", &loc, func(_ context.Context, stdout, stderr io.Writer) error {
		path, err := operatorTokenFile(&loc, file)
		if err != nil {
			return err
		}
		token, rec := controlplane.NewOperatorToken(name, time.Now())
		if err := controlplane.AddOperatorToken(path, rec); err != nil {
			return err
		}
		if _, err := fmt.Fprintln(stdout, token); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "issued operator token %s into %s; it is shown only this once.\n"+
			"Use it as Authorization: Bearer <token> on /api/admin/… (docs/budgets.md); revoke it with\n"+
			"  talkide admin operator-token revoke --id %s\n", rec.ID, path, rec.ID)
		return nil
	})
	fs := cmd.Flags()
	fs.StringVar(&name, "name", "", "who or what the token is for (shown by list)")
	fs.StringVar(&file, "file", "", "the token file the control-plane reads (its --operator-tokens; default DATA-DIR/operator-tokens)")
	return cmd
}

func newAdminOperatorListCmd(std cli.Stdio) *cobra.Command {
	var loc cpLocation
	var file string
	cmd := adminLeaf(std, "list", "List the operator tokens", &loc, func(_ context.Context, stdout, stderr io.Writer) error {
		path, err := operatorTokenFile(&loc, file)
		if err != nil {
			return err
		}
		ts, err := controlplane.ReadOperatorTokens(path)
		if err != nil {
			return err
		}
		if len(ts) == 0 {
			fmt.Fprintln(stdout, "no operator tokens (issue one: talkide admin operator-token issue --name NAME)")
			return nil
		}
		t := cli.Table{Head: []string{"ID", "CREATED", "NAME"}}
		for _, o := range ts {
			n := o.Name
			if n == "" {
				n = "-"
			}
			t.Add(o.ID, cli.FormatTime(o.CreatedAt), n)
		}
		return t.Write(stdout)
	})
	fs := cmd.Flags()
	fs.StringVar(&file, "file", "", "the token file (default DATA-DIR/operator-tokens)")
	return cmd
}

func newAdminOperatorRevokeCmd(std cli.Stdio) *cobra.Command {
	var loc cpLocation
	var id, file string
	cmd := adminLeaf(std, "revoke", "Revoke an operator token", &loc, func(_ context.Context, stdout, stderr io.Writer) error {
		if id == "" {
			return errors.New("--id is required")
		}
		path, err := operatorTokenFile(&loc, file)
		if err != nil {
			return err
		}
		rec, err := controlplane.RemoveOperatorToken(path, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "revoked operator token %s (created %s); running control-planes refuse it from their next request\n", rec.ID, cli.FormatTime(rec.CreatedAt))
		return nil
	})
	fs := cmd.Flags()
	fs.StringVar(&id, "id", "", "id of the operator token to revoke (required; see list)")
	fs.StringVar(&file, "file", "", "the token file (default DATA-DIR/operator-tokens)")
	return cmd
}

// Formatting.

// calls renders a number of calls: "1 call", "1,024 calls".
func calls(n int64) string {
	if n == 1 {
		return "1 call"
	}
	return budget.FormatCount(n) + " calls"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "-"
}
