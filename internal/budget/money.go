package budget

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Money is an amount of US dollars in nanodollars (1e-9 USD). Every price on
// Anthropic's price list is a whole number of nanodollars per token (the
// cheapest, $0.01 per million tokens, is 10), so costs add up exactly, with
// no floating point and no rounding. An int64 holds ±$9.2 billion.
type Money int64

// Units of Money.
const (
	Nanodollar  Money = 1
	Microdollar Money = 1e3
	Cent        Money = 1e7
	Dollar      Money = 1e9
)

// String formats m as dollars with at least two decimals and no trailing
// zeros beyond them: "$5.00", "$0.0375", "-$1.000000001".
func (m Money) String() string {
	sign := ""
	u := uint64(m)
	if m < 0 {
		sign = "-"
		u = uint64(-(m + 1)) + 1 // also right for math.MinInt64
	}
	whole, frac := u/uint64(Dollar), u%uint64(Dollar)
	f := fmt.Sprintf("%09d", frac)
	f = strings.TrimRight(f, "0")
	for len(f) < 2 {
		f += "0"
	}
	return sign + "$" + strconv.FormatUint(whole, 10) + "." + f
}

// ErrMoney is wrapped by every ParseMoney failure.
var ErrMoney = errors.New("invalid amount of money")

// ParseMoney parses a decimal amount of dollars such as "5", "$5.00" or
// "-0.000000001": an optional "-", an optional "$", digits with at most one
// point and at most nine decimals; no exponent, no separators. It never goes
// through floating point.
func ParseMoney(s string) (Money, error) {
	orig := s
	s = strings.TrimSpace(s)
	neg := false
	if rest, ok := strings.CutPrefix(s, "-"); ok {
		neg, s = true, rest
	}
	s = strings.TrimPrefix(s, "$")
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || !digits(whole) || !digits(frac) {
		return 0, fmt.Errorf("%w: %q", ErrMoney, orig)
	}
	if len(frac) > 9 {
		return 0, fmt.Errorf("%w: %q has more than nine decimals (a nanodollar)", ErrMoney, orig)
	}
	var w uint64
	if whole != "" {
		var err error
		if w, err = strconv.ParseUint(whole, 10, 64); err != nil || w > uint64(math.MaxInt64/int64(Dollar)) {
			return 0, fmt.Errorf("%w: %q is too large", ErrMoney, orig)
		}
	}
	f := uint64(0)
	if frac != "" {
		f, _ = strconv.ParseUint(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	}
	m := Money(w)*Dollar + Money(f)
	if neg {
		m = -m
	}
	return m, nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
