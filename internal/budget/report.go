package budget

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/talkide/platform/internal/contract"
)

// Dimension is what a usage report groups by.
type Dimension string

// Dimensions of a usage report.
const (
	ByUser         Dimension = "user"
	ByTenant       Dimension = "tenant"
	ByEnv          Dimension = "env" // key "tenant/env"
	ByConversation Dimension = "conversation"
	ByModel        Dimension = "model" // the model billed
	ByDay          Dimension = "day"   // the UTC day the call was settled, "2006-01-02"
)

// Dimensions lists every dimension.
var Dimensions = []Dimension{ByUser, ByTenant, ByEnv, ByConversation, ByModel, ByDay}

// ErrInvalidReport is wrapped by the errors of a malformed report query.
var ErrInvalidReport = errors.New("invalid usage report")

// ParseDimensions reads a comma-separated list of dimensions, such as
// "user" or "tenant,day", each at most once.
func ParseDimensions(s string) ([]Dimension, error) {
	var out []Dimension
	for f := range strings.SplitSeq(s, ",") {
		d := Dimension(strings.ToLower(strings.TrimSpace(f)))
		if !slices.Contains(Dimensions, d) {
			return nil, contract.Invalid(ErrInvalidReport, "by", "%q: cannot group by it; want user, tenant, env, conversation, model or day (several separated by commas)", f)
		}
		if slices.Contains(out, d) {
			return nil, contract.Invalid(ErrInvalidReport, "by", "names %s twice", d)
		}
		out = append(out, d)
	}
	return out, nil
}

// ParseReportRange reads the time range of a report: each bound a date
// (2006-01-02, UTC) or an RFC 3339 time. A date as to includes that day. An
// empty from is the start of now's calendar month (UTC); an empty to is
// open, returned as the zero time.
func ParseReportRange(from, to string, now time.Time) (time.Time, time.Time, error) {
	var f, t time.Time
	if from == "" {
		n := now.UTC()
		f = time.Date(n.Year(), n.Month(), 1, 0, 0, 0, 0, time.UTC)
	} else {
		var err error
		if f, err = parseReportTime(from, false); err != nil {
			return f, t, contract.Invalid(ErrInvalidReport, "from", "%s", err)
		}
	}
	if to != "" {
		var err error
		if t, err = parseReportTime(to, true); err != nil {
			return f, t, contract.Invalid(ErrInvalidReport, "to", "%s", err)
		}
		if !t.After(f) {
			return f, t, contract.Invalid(ErrInvalidReport, "to", "(%s) is not after from (%s)", t.Format(time.RFC3339), f.Format(time.RFC3339))
		}
	}
	return f, t, nil
}

func parseReportTime(s string, end bool) (time.Time, error) {
	if d, err := time.Parse(time.DateOnly, s); err == nil {
		if end {
			d = d.AddDate(0, 0, 1)
		}
		return d, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return t, fmt.Errorf("%q is neither a date (2006-01-02) nor an RFC 3339 time (2006-01-02T15:04:05Z)", s)
	}
	return t.UTC(), nil
}

// ReportOrder is how a report's rows are sorted.
type ReportOrder string

// Orders of rows.
const (
	// OrderCost sorts by cost, highest first, then by key.
	OrderCost ReportOrder = "cost"
	// OrderKey sorts by key, in the order of the dimensions (days
	// chronologically).
	OrderKey ReportOrder = "key"
)

// ReportQuery selects and groups ledger entries.
type ReportQuery struct {
	By []Dimension // none: one row, the total
	// Filters; empty matches everything. Env needs Tenant.
	User, Tenant, Env, Conversation, Model string
	From, To                               time.Time // settled in [From, To); zero: unbounded
	// Order of the rows; empty: OrderKey when By holds ByDay, else
	// OrderCost.
	Order ReportOrder
	// MaxRows, when positive, keeps the first rows only (Report.Total still
	// covers all).
	MaxRows int
}

// Totals add up ledger entries.
type Totals struct {
	Requests           int64 // forwarded calls
	Failed             int64 // of which the upstream answered with an error, or never answered
	Estimated          int64 // of which part of the usage is an estimate (docs/budgets.md)
	InputTokens        int64
	CacheWrite5mTokens int64
	CacheWrite1hTokens int64
	CacheReadTokens    int64
	OutputTokens       int64
	WebSearchRequests  int64
	Cost               Money
}

func (t *Totals) add(e Entry) {
	t.Requests++
	if e.Status < 200 || e.Status > 299 {
		t.Failed++
	}
	if e.Estimated {
		t.Estimated++
	}
	t.InputTokens += e.InputTokens
	t.CacheWrite5mTokens += e.CacheWrite5mTokens
	t.CacheWrite1hTokens += e.CacheWrite1hTokens
	t.CacheReadTokens += e.CacheReadTokens
	t.OutputTokens += e.OutputTokens
	t.WebSearchRequests += e.WebSearchRequests
	t.Cost += e.Cost
}

// ReportRow is one group of a report.
type ReportRow struct {
	Key []string // one value per ReportQuery.By
	Totals
}

// Report is usage grouped by some dimensions.
type Report struct {
	Query ReportQuery // as run, with its Order filled in
	Rows  []ReportRow
	Total Totals
	// Omitted is the number of rows MaxRows left out.
	Omitted int
}

// reportPage is how many ledger entries a report reads at a time; tests
// make it small.
var reportPage = 5000

// Report adds up the ledger entries that q selects, by q.By. It reads the
// ledger a page at a time, so its memory grows with the number of groups,
// not of entries.
func (s *Service) Report(ctx context.Context, q ReportQuery) (*Report, error) {
	if q.Env != "" && q.Tenant == "" {
		return nil, contract.Invalid(ErrInvalidReport, "env", "needs tenant: an env is named within its tenant")
	}
	if !q.To.IsZero() && !q.To.After(q.From) {
		return nil, contract.Invalid(ErrInvalidReport, "to", "is not after from")
	}
	for _, d := range q.By {
		if !slices.Contains(Dimensions, d) {
			return nil, contract.Invalid(ErrInvalidReport, "by", "%q: cannot group by it", d)
		}
	}
	switch q.Order {
	case "":
		q.Order = OrderCost
		if slices.Contains(q.By, ByDay) {
			q.Order = OrderKey
		}
	case OrderCost, OrderKey:
	default:
		return nil, contract.Invalid(ErrInvalidReport, "order", "%q is not an order: want cost or key", q.Order)
	}

	rep := &Report{Query: q}
	groups := map[string]*ReportRow{}
	add := func(e Entry) {
		if q.Model != "" && e.Model != q.Model {
			return
		}
		rep.Total.add(e)
		key := make([]string, len(q.By))
		for i, d := range q.By {
			key[i] = e.dimension(d)
		}
		id := strings.Join(key, "\x00")
		g := groups[id]
		if g == nil {
			g = &ReportRow{Key: key}
			groups[id] = g
		}
		g.add(e)
	}
	lq := LedgerQuery{User: q.User, Tenant: q.Tenant, Env: q.Env, Conversation: q.Conversation, From: q.From, To: q.To}
	if err := s.scanLedger(ctx, lq, add); err != nil {
		return nil, err
	}

	rep.Rows = make([]ReportRow, 0, len(groups))
	for _, g := range groups {
		rep.Rows = append(rep.Rows, *g)
	}
	byKey := func(a, b ReportRow) int { return slices.Compare(a.Key, b.Key) }
	if q.Order == OrderCost {
		slices.SortFunc(rep.Rows, func(a, b ReportRow) int {
			return cmp.Or(cmp.Compare(b.Cost, a.Cost), byKey(a, b))
		})
	} else {
		slices.SortFunc(rep.Rows, byKey)
	}
	if q.MaxRows > 0 && len(rep.Rows) > q.MaxRows {
		rep.Omitted = len(rep.Rows) - q.MaxRows
		rep.Rows = rep.Rows[:q.MaxRows]
	}
	return rep, nil
}

// scanLedger calls f for every entry q selects, newest first, reading a
// page at a time. Pages are cut by settlement time: the next page is what
// was settled at or before the last entry of this one, less the entries of
// that millisecond already seen.
func (s *Service) scanLedger(ctx context.Context, q LedgerQuery, f func(Entry)) error {
	var (
		boundary time.Time       // SettledAt of the last entry of the previous page
		seen     map[string]bool // entries settled at boundary, already passed to f
	)
	q.Limit = reportPage
	for {
		es, err := s.store.BudgetLedger(ctx, q)
		if err != nil {
			return fmt.Errorf("budget: read ledger: %w", err)
		}
		fresh := 0
		for _, e := range es {
			if seen[e.ID] && e.SettledAt.Equal(boundary) {
				continue
			}
			fresh++
			f(e)
		}
		if len(es) < q.Limit {
			return nil
		}
		last := es[len(es)-1].SettledAt
		if !last.Equal(boundary) {
			boundary, seen = last, map[string]bool{}
		}
		for _, e := range es {
			if e.SettledAt.Equal(last) {
				seen[e.ID] = true
			}
		}
		q.To = last.Add(time.Millisecond) // times are kept to the millisecond
		if fresh == 0 {
			// A whole page settled in one millisecond, all seen: read more
			// of it at once.
			q.Limit *= 2
		}
	}
}

// dimension returns e's key in d.
func (e Entry) dimension(d Dimension) string {
	switch d {
	case ByUser:
		return e.User
	case ByTenant:
		return e.Tenant
	case ByEnv:
		return e.Tenant + "/" + e.Env
	case ByConversation:
		return e.Conversation
	case ByModel:
		return e.Model
	case ByDay:
		return e.SettledAt.UTC().Format(time.DateOnly)
	}
	return ""
}
