package budget

import (
	"testing"
)

func TestMoneyDisplay(t *testing.T) {
	for m, want := range map[Money]string{
		0:                  "$0.00",
		5 * Dollar:         "$5.00",
		17_385_000:         "$0.017385",
		12_345_678_901:     "$12.345679",
		1_234_567 * Dollar: "$1,234,567.00",
		400:                "<$0.000001",
		500:                "$0.000001",
		-25 * Cent:         "-$0.25",
		Dollar / 10:        "$0.10",
	} {
		if got := m.Display(); got != want {
			t.Errorf("Money(%d).Display() = %q, want %q", m, got, want)
		}
	}
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1_234_567: "1,234,567", -45_000: "-45,000"} {
		if got := FormatCount(n); got != want {
			t.Errorf("FormatCount(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestDisplayedPartsAddUp: what a status line shows as used, held and
// remaining adds up to the limit it shows, whatever the nanodollars.
func TestDisplayedPartsAddUp(t *testing.T) {
	tests := map[string]LimitStatus{
		"half a microdollar used": {Limit: Limit{Kind: SpendPerDay, Max: int64(Dollar)}, Used: 500},
		"odd used and held":       {Limit: Limit{Kind: SpendPerDay, Max: int64(Dollar)}, Used: 123_456_789, Held: 500_000_500},
		"over the limit":          {Limit: Limit{Kind: SpendPerMonth, Max: int64(Dollar)}, Used: int64(2 * Dollar)},
		"odd limit":               {Limit: Limit{Kind: SpendPer5h, Max: 1_000_000_700}, Used: 499_999_600},
		"tokens":                  {Limit: Limit{Kind: TokensPerDay, Max: 1000}, Used: 400, Held: 100},
	}
	for name, st := range tests {
		t.Run(name, func(t *testing.T) {
			limit, used, held, rem := st.Displayed()
			if used+held <= limit && used+held+rem != limit {
				t.Errorf("used %d + held %d + remaining %d != limit %d", used, held, rem, limit)
			}
			if rem < 0 {
				t.Errorf("remaining %d < 0", rem)
			}
			if st.Kind.Spend() && (Money(limit)%Microdollar != 0 || Money(used)%Microdollar != 0) {
				t.Errorf("spend parts not rounded to the microdollar: limit %d used %d", limit, used)
			}
		})
	}
	// The case a user saw: $1.00 with 0.0000005 used showed $1.000001 in all.
	st := LimitStatus{Limit: Limit{Kind: SpendPerDay, Max: int64(Dollar)}, Used: 500}
	_, used, _, rem := st.Displayed()
	if got := Money(used).Display() + " + " + Money(rem).Display(); got != "$0.000001 + $0.999999" {
		t.Errorf("shown as %s", got)
	}
}

func TestKindOrder(t *testing.T) {
	for i, k := range Kinds {
		if k.Order() != i {
			t.Errorf("%s.Order() = %d, want %d", k, k.Order(), i)
		}
	}
	if Kind("nope").Order() != len(Kinds) {
		t.Error("an unknown kind does not sort last")
	}
}
