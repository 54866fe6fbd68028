package budget

import (
	"errors"
	"math"
	"testing"
)

func TestMoneyString(t *testing.T) {
	tests := map[Money]string{
		0:                    "$0.00",
		5 * Dollar:           "$5.00",
		37_500_000:           "$0.0375",
		1:                    "$0.000000001",
		-Dollar - 1:          "-$1.000000001",
		173_850_000:          "$0.17385",
		Money(math.MaxInt64): "$9223372036.854775807",
		Money(math.MinInt64): "-$9223372036.854775808",
	}
	for m, want := range tests {
		if got := m.String(); got != want {
			t.Errorf("Money(%d).String() = %q, want %q", int64(m), got, want)
		}
	}
}

func TestParseMoney(t *testing.T) {
	tests := map[string]struct {
		want Money
		err  bool
	}{
		"5":            {want: 5 * Dollar},
		"$5.00":        {want: 5 * Dollar},
		" 0.0375 ":     {want: 37_500_000},
		".5":           {want: Dollar / 2},
		"3.":           {want: 3 * Dollar},
		"0.000000001":  {want: 1},
		"-$1.25":       {want: -1_250_000_000},
		"0.0000000001": {err: true},
		"":             {err: true},
		".":            {err: true},
		"$":            {err: true},
		"1e3":          {err: true},
		"1,000":        {err: true},
		"+1":           {err: true},
		"1.2.3":        {err: true},
		"9223372037":   {err: true},
		"NaN":          {err: true},
	}
	for in, tc := range tests {
		got, err := ParseMoney(in)
		if tc.err {
			if err == nil || !errors.Is(err, ErrMoney) {
				t.Errorf("ParseMoney(%q) = %v, %v; want an ErrMoney", in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseMoney(%q) = %v, %v; want %v", in, got, err, tc.want)
		}
	}
}

// FuzzParseMoney: whatever it accepts, String gives back an amount that
// parses to the same value.
func FuzzParseMoney(f *testing.F) {
	for _, s := range []string{"5", "$0.0375", "-1.000000001", "9223372036.854775807", ".", "1e9", "0.1234567891"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMoney(s)
		if err != nil {
			return
		}
		back, err := ParseMoney(m.String())
		if err != nil || back != m {
			t.Fatalf("%q → %v → %q → %v, %v", s, int64(m), m.String(), int64(back), err)
		}
	})
}
