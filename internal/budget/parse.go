package budget

import (
	"strconv"
	"strings"

	"github.com/talkide/platform/internal/contract"
)

// kindAliases are the short names operators type for kinds.
var kindAliases = map[string]Kind{
	"daily":          SpendPerDay,
	"day":            SpendPerDay,
	"weekly":         SpendPerWeek,
	"week":           SpendPerWeek,
	"monthly":        SpendPerMonth,
	"month":          SpendPerMonth,
	"rolling-5h":     SpendPer5h,
	"5h":             SpendPer5h,
	"rpm":            RequestsPerMinute,
	"tokens-per-day": TokensPerDay,
	"tokens/day":     TokensPerDay,
	"daily-tokens":   TokensPerDay,
	"tpd":            TokensPerDay,
	"concurrency":    Concurrent,
	"concurrent":     Concurrent,
}

// KindAliases is the help text of ParseKind's short names.
const KindAliases = "daily, weekly, monthly, rolling-5h (spend); rpm; tokens-per-day; concurrency"

// ParseKind reads a kind by its name (spend_per_day, also spelt
// spend-per-day) or a short alias: daily, weekly, monthly, rolling-5h or
// 5h, rpm, tokens-per-day, concurrency. An error is a *contract.FieldError
// about "kind" that wraps ErrInvalidLimit.
func ParseKind(s string) (Kind, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if k := Kind(strings.ReplaceAll(s, "-", "_")); k.Valid() {
		return k, nil
	}
	if k, ok := kindAliases[s]; ok {
		return k, nil
	}
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = string(k)
	}
	return "", contract.Invalid(ErrInvalidLimit, "kind", "%q is an unknown kind: want one of %s, or %s", s, strings.Join(names, ", "), KindAliases)
}

// ParseAmount reads the maximum of a limit of kind k: dollars for a
// spending limit ("5", "$5.00", "0.25"; see ParseMoney), a whole number
// otherwise. An error is a *contract.FieldError about "amount" that wraps
// ErrInvalidLimit.
func ParseAmount(k Kind, s string) (int64, error) {
	s = strings.TrimSpace(s)
	if k.Spend() {
		m, err := ParseMoney(s)
		if err != nil {
			return 0, contract.Invalid(ErrInvalidLimit, "amount", "%q is not an amount of dollars (%s is a spending limit: give dollars, e.g. 5.00)", s, k)
		}
		if m < 0 {
			return 0, contract.Invalid(ErrInvalidLimit, "amount", "is negative")
		}
		return int64(m), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || !digits(s) {
		return 0, contract.Invalid(ErrInvalidLimit, "amount", "%q is not a whole number (%s counts %s)", s, k, k.unit())
	}
	return n, nil
}

// unit names what k counts.
func (k Kind) unit() string {
	switch {
	case k.Spend():
		return "dollars"
	case k == TokensPerDay:
		return "tokens"
	case k == RequestsPerMinute:
		return "requests"
	}
	return "calls in flight"
}
