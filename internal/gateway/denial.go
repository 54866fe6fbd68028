package gateway

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/contract"
)

// retrySoon is the longest wait for which the gateway leaves a denied
// call's retry to its client. The SDKs wait out whatever Retry-After says,
// so a denial that cannot pass sooner (a spent daily limit: hours) also
// says x-should-retry: false, and the client fails at once, with the
// denial, instead of sleeping until the limit resets while its user waits.
const retrySoon = 10 * time.Second

// budgetError is the answer to a call a budget limit refuses: 429, with
// Retry-After and, when a retry cannot pass soon, x-should-retry: false set
// on h; the body's message says which limit and its talkide_budget object
// the same in fields.
func budgetError(h http.Header, d *budget.Denial) *httpError {
	h.Set("Retry-After", strconv.FormatInt(retryAfterSeconds(d), 10))
	if !passesSoon(d) {
		h.Set("X-Should-Retry", "false")
	}
	return &httpError{Status: http.StatusTooManyRequests, Type: errRateLimit, Msg: d.Error(), Budget: budgetDetails(d)}
}

// passesSoon says whether a retry of d's call may pass within retrySoon:
// when only calls in flight stand in the way, or the limit's window frees
// enough room that soon (the end of a clock minute). A call that alone is
// more than the limit never passes.
func passesSoon(d *budget.Denial) bool {
	if d.InFlight {
		return true
	}
	return !d.Resets.IsZero() && d.RetryAfter <= retrySoon && d.Need <= d.Limit.Max
}

func retryAfterSeconds(d *budget.Denial) int64 {
	return int64(math.Ceil(d.RetryAfter.Seconds()))
}

// budgetDetails is d as the wire carries it (contract.BudgetDenial).
func budgetDetails(d *budget.Denial) *contract.BudgetDenial {
	l := d.Limit
	b := &contract.BudgetDenial{
		Scope: string(l.Subject.Scope), Subject: l.Subject.ID, Kind: string(l.Kind), Hard: l.Hard,
		InFlight: d.InFlight, MidStream: d.MidStream,
		RetryAfterSeconds: retryAfterSeconds(d),
	}
	if l.Kind.Spend() {
		b.MaxUSD, b.UsedUSD, b.HeldUSD, b.NeedUSD = usd(l.Max), usd(d.Used), usd(d.Held), usd(d.Need)
	} else {
		b.Max, b.Used, b.Held, b.Need = ptr(l.Max), ptr(d.Used), ptr(d.Held), ptr(d.Need)
	}
	if !d.Resets.IsZero() {
		t := d.Resets.UTC()
		b.ResetsAt = &t
	}
	return b
}

// usd renders nanodollars as an exact decimal number of dollars, as the
// operator API does: "5.00", "0.017385".
func usd(v int64) string { return strings.Replace(budget.Money(v).String(), "$", "", 1) }

func ptr(v int64) *int64 { return &v }
