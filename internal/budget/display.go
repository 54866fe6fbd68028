package budget

import (
	"fmt"
	"strconv"
	"strings"
)

// How amounts are shown to people (the CLI's tables, status lines), as
// opposed to Money.String, which is exact and what the APIs carry.

// Rounded is m rounded to the microdollar, halves away from zero: the
// precision a person reads.
func (m Money) Rounded() Money {
	if m < 0 {
		return -(-m).Rounded()
	}
	return (m + Microdollar/2) / Microdollar * Microdollar
}

// Display formats m for people: thousands separators and two to six
// decimals, rounded to the microdollar: "$1,234.50", "$0.017385". An
// amount that rounds to nothing but is not zero is "<$0.000001".
func (m Money) Display() string {
	sign := ""
	if m < 0 {
		sign, m = "-", -m
	}
	micro := m.Rounded() / Microdollar
	if micro == 0 && m > 0 {
		return sign + "<$0.000001"
	}
	frac := strings.TrimRight(fmt.Sprintf("%06d", micro%1_000_000), "0")
	for len(frac) < 2 {
		frac += "0"
	}
	return sign + "$" + FormatCount(int64(micro/1_000_000)) + "." + frac
}

// FormatCount renders n with a comma between groups of three digits.
func FormatCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Display formats v in k's unit for people: dollars for a spending
// limit, a count otherwise.
func (k Kind) Display(v int64) string {
	if k.Spend() {
		return Money(v).Display()
	}
	return FormatCount(v)
}

// Remaining is what the limit leaves: its maximum less what is used and
// held, never below zero.
func (st LimitStatus) Remaining() int64 { return max(st.Max-st.Used-st.Held, 0) }

// Displayed returns the limit, used, held and remaining of st as a
// display rounds them, so that the parts add up to the limit shown:
// used and held are rounded, and remaining is what the rounded limit
// leaves after them. Rounding each on its own could show $0.500001 used
// and $0.500000 remaining of $1.00.
func (st LimitStatus) Displayed() (limit, used, held, remaining int64) {
	if !st.Kind.Spend() {
		return st.Max, st.Used, st.Held, st.Remaining()
	}
	r := func(v int64) int64 { return int64(Money(v).Rounded()) }
	limit, used, held = r(st.Max), r(st.Used), r(st.Held)
	return limit, used, held, max(limit-used-held, 0)
}

// Order is k's place in Kinds (rolling window, day, week, month, tokens,
// requests, concurrency): the order in which displays list a subject's
// limits.
func (k Kind) Order() int {
	for i, x := range Kinds {
		if x == k {
			return i
		}
	}
	return len(Kinds)
}
