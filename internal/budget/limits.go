package budget

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/talkide/platform/internal/contract"
)

// Scope says what a limit applies to.
type Scope string

// Scopes.
const (
	ScopeUser   Scope = "user"   // one user, across all tenants and envs
	ScopeTenant Scope = "tenant" // every user of one tenant
	ScopeEnv    Scope = "env"    // every user of one tenant-env
)

// Subject is a user, a tenant or a tenant-env. The ID of an env is
// "tenant/env" (tenant and env names cannot hold a slash).
type Subject struct {
	Scope Scope
	ID    string
}

// User, Tenant and Env name subjects.
func User(id string) Subject         { return Subject{ScopeUser, id} }
func Tenant(id string) Subject       { return Subject{ScopeTenant, id} }
func Env(tenant, env string) Subject { return Subject{ScopeEnv, tenant + "/" + env} }

func (s Subject) String() string { return string(s.Scope) + " " + s.ID }

// Valid reports whether s names a subject.
func (s Subject) Valid() bool {
	switch s.Scope {
	case ScopeUser, ScopeTenant:
		return s.ID != ""
	case ScopeEnv:
		t, e, ok := strings.Cut(s.ID, "/")
		return ok && t != "" && e != "" && !strings.Contains(e, "/")
	}
	return false
}

// Kind is what a limit limits, over which window.
type Kind string

// Kinds of limits. Spending limits count Money; the others count requests,
// tokens (Usage.Tokens) or calls in flight.
//
// Day, week and month are calendar periods in UTC (weeks start on Monday);
// the five hours are a rolling window, measured in five-minute steps (spend
// leaves it between 5 h and 5 h 5 min after it was settled); a minute is a
// clock minute.
const (
	SpendPerDay       Kind = "spend_per_day"
	SpendPerWeek      Kind = "spend_per_week"
	SpendPerMonth     Kind = "spend_per_month"
	SpendPer5h        Kind = "spend_per_5h"
	RequestsPerMinute Kind = "requests_per_minute"
	TokensPerDay      Kind = "tokens_per_day"
	Concurrent        Kind = "concurrent_requests"
)

// Kinds lists every kind, in the order limits are reported.
var Kinds = []Kind{SpendPer5h, SpendPerDay, SpendPerWeek, SpendPerMonth, TokensPerDay, RequestsPerMinute, Concurrent}

// Spend reports whether k limits money.
func (k Kind) Spend() bool {
	switch k {
	case SpendPerDay, SpendPerWeek, SpendPerMonth, SpendPer5h:
		return true
	}
	return false
}

// Valid reports whether k is one of the kinds.
func (k Kind) Valid() bool {
	for _, x := range Kinds {
		if k == x {
			return true
		}
	}
	return false
}

// describe says what k limits, for messages.
func (k Kind) describe() string {
	switch k {
	case SpendPerDay:
		return "spending limit per day"
	case SpendPerWeek:
		return "spending limit per week"
	case SpendPerMonth:
		return "spending limit per month"
	case SpendPer5h:
		return "spending limit per 5 hours"
	case RequestsPerMinute:
		return "limit of requests per minute"
	case TokensPerDay:
		return "limit of tokens per day"
	case Concurrent:
		return "limit of concurrent requests"
	}
	return string(k)
}

// Limit caps one kind of use by one subject.
type Limit struct {
	Subject Subject
	Kind    Kind
	// Max is the cap: nanodollars (a Money) for spending limits, a count
	// otherwise. Zero refuses every call.
	Max int64
	// Hard applies to spending limits: a call whose stream would take the
	// spend past Max is cut off mid-stream with a final error event. A soft
	// limit (the default) refuses new calls but lets admitted ones finish.
	Hard      bool
	UpdatedAt time.Time
}

// ErrInvalidLimit is wrapped by the validation errors of limits (each a
// *contract.FieldError).
var ErrInvalidLimit = errors.New("invalid limit")

func (l Limit) validate() error {
	switch {
	case !l.Subject.Valid():
		return contract.Invalid(ErrInvalidLimit, "subject", "%q %q is not a user, tenant or tenant-env", l.Subject.Scope, l.Subject.ID)
	case !l.Kind.Valid():
		return contract.Invalid(ErrInvalidLimit, "kind", "%q is not a kind of limit", l.Kind)
	case l.Max < 0:
		return contract.Invalid(ErrInvalidLimit, "max", "is negative")
	case l.Hard && !l.Kind.Spend():
		return contract.Invalid(ErrInvalidLimit, "hard", "is refused: only spending limits can be hard, not %s", l.Kind)
	}
	return nil
}

// format renders an amount of k's unit for a denial's message. Money is
// shown as talkide admin budget status shows it: settled costs are
// nanodollars, and exact figures beside round limits ("$0.011174816" next
// to "$1.00") read as if they were unequally precise. The exact amounts
// travel in the denial's fields.
func (k Kind) format(v int64) string {
	switch {
	case k.Spend():
		return Money(v).Display()
	case k == TokensPerDay:
		return fmt.Sprintf("%d tokens", v)
	case k == RequestsPerMinute:
		return fmt.Sprintf("%d requests", v)
	}
	return fmt.Sprintf("%d calls", v)
}

// Periods.

const (
	fiveMinutes = 5 * time.Minute
	fiveHours   = 5 * time.Hour
)

// periodStart returns the start of the calendar period of k that holds t
// (UTC), and the start of the next one. For SpendPer5h and Concurrent,
// which have no calendar period, ok is false.
func periodStart(k Kind, t time.Time) (start, next time.Time, ok bool) {
	t = t.UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	switch k {
	case SpendPerDay, TokensPerDay:
		return day, day.AddDate(0, 0, 1), true
	case SpendPerWeek:
		back := (int(day.Weekday()) + 6) % 7 // days since Monday
		start = day.AddDate(0, 0, -back)
		return start, start.AddDate(0, 0, 7), true
	case SpendPerMonth:
		start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 1, 0), true
	case RequestsPerMinute:
		start = t.Truncate(time.Minute)
		return start, start.Add(time.Minute), true
	}
	return time.Time{}, time.Time{}, false
}

// WindowStart returns the start of the window a limit of kind k counts at
// now: its calendar period, the rolling five hours' first bucket, or now
// itself for Concurrent, which counts only calls in flight. Whoever shows
// a limit's figures can use it to tell which settled calls they cover.
func WindowStart(k Kind, now time.Time) time.Time {
	switch k {
	case SpendPer5h:
		return windowStart5h(now)
	case Concurrent:
		return now.UTC()
	}
	start, _, _ := periodStart(k, now)
	return start
}
