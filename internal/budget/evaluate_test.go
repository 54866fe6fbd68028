package budget

import (
	"strings"
	"testing"
	"time"
)

func TestEvaluate(t *testing.T) {
	now := time.Date(2026, 11, 30, 14, 7, 30, 0, time.UTC) // a Monday
	u := User("u1")
	bucket := func(size BucketSize, start time.Time, cost Money, tokens, requests int64) Bucket {
		return Bucket{Subject: u, Size: size, Start: start, Cost: cost, Tokens: tokens, Requests: requests}
	}
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	r := Reservation{ID: "r", User: "u1", Tenant: "t", Env: "e", Cost: 100, Tokens: 10}
	inFlight := 2 * time.Second
	tests := map[string]struct {
		limit    Limit
		snap     Snapshot
		ok       bool
		inFlight bool
		retry    time.Duration
		msg      string
	}{
		"day fits exactly": {
			limit: Limit{Subject: u, Kind: SpendPerDay, Max: 1000},
			snap:  Snapshot{Buckets: []Bucket{bucket(BucketDay, day, 800, 0, 0)}, Held: map[Subject]Held{u: {Cost: 100}}},
			ok:    true,
		},
		"yesterday does not count": {
			limit: Limit{Subject: u, Kind: SpendPerDay, Max: 1000},
			snap:  Snapshot{Buckets: []Bucket{bucket(BucketDay, day.AddDate(0, 0, -1), 5000, 0, 0)}},
			ok:    true,
		},
		"day spent": {
			limit: Limit{Subject: u, Kind: SpendPerDay, Max: 1000},
			snap:  Snapshot{Buckets: []Bucket{bucket(BucketDay, day, 901, 0, 0)}},
			retry: day.AddDate(0, 0, 1).Sub(now),
			msg:   "user u1 spending limit per day reached: $0.000001 used, $0.00 held by calls in flight, this call needs <$0.000001, the limit is $0.000001; room frees up at 2026-12-01T00:00:00Z",
		},
		"held by calls in flight": {
			limit:    Limit{Subject: u, Kind: SpendPerDay, Max: 1000},
			snap:     Snapshot{Buckets: []Bucket{bucket(BucketDay, day, 800, 0, 0)}, Held: map[Subject]Held{u: {Cost: 101}}},
			inFlight: true,
			retry:    inFlight,
			msg:      "retry when calls in flight have finished",
		},
		"week from Monday": {
			limit: Limit{Subject: u, Kind: SpendPerWeek, Max: 1000},
			snap:  Snapshot{Buckets: []Bucket{bucket(BucketDay, day, 500, 0, 0), bucket(BucketDay, day.AddDate(0, 0, -1), 500, 0, 0)}},
			ok:    true, // Sunday was last week
		},
		"month": {
			limit: Limit{Subject: u, Kind: SpendPerMonth, Max: 1000},
			snap:  Snapshot{Buckets: []Bucket{bucket(BucketDay, day, 500, 0, 0), bucket(BucketDay, day.AddDate(0, 0, -29), 500, 0, 0)}},
			retry: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Sub(now),
			msg:   "per month",
		},
		"rolling five hours": {
			limit: Limit{Subject: u, Kind: SpendPer5h, Max: 1000},
			snap: Snapshot{Buckets: []Bucket{
				bucket(Bucket5m, time.Date(2026, 11, 30, 9, 5, 0, 0, time.UTC), 300, 0, 0), // still in: 09:05 ≥ 09:05
				bucket(Bucket5m, time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC), 300, 0, 0),
				bucket(Bucket5m, time.Date(2026, 11, 30, 14, 5, 0, 0, time.UTC), 350, 0, 0),
				bucket(Bucket5m, time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), 9999, 0, 0), // out
			}},
			// 950 used + 100 > 1000 by 50: the 09:05 bucket leaves at 14:10.
			retry: time.Date(2026, 11, 30, 14, 10, 0, 0, time.UTC).Sub(now),
			msg:   "per 5 hours",
		},
		"tokens per day": {
			limit: Limit{Subject: u, Kind: TokensPerDay, Max: 100},
			snap:  Snapshot{Buckets: []Bucket{bucket(BucketDay, day, 0, 85, 0)}, Held: map[Subject]Held{u: {Tokens: 5}}},
			ok:    true,
		},
		"tokens per day spent": {
			limit: Limit{Subject: u, Kind: TokensPerDay, Max: 100},
			snap:  Snapshot{Buckets: []Bucket{bucket(BucketDay, day, 0, 91, 0)}},
			retry: day.AddDate(0, 0, 1).Sub(now),
			msg:   "91 tokens used",
		},
		"requests per minute": {
			limit: Limit{Subject: u, Kind: RequestsPerMinute, Max: 3},
			snap:  Snapshot{Buckets: []Bucket{bucket(BucketMinute, now.Truncate(time.Minute), 0, 0, 3)}},
			retry: 30 * time.Second,
			msg:   "3 requests this minute, the limit is 3",
		},
		"an extension is no new request": {
			limit: Limit{Subject: u, Kind: RequestsPerMinute, Max: 3},
			snap:  Snapshot{Buckets: []Bucket{bucket(BucketMinute, now.Truncate(time.Minute), 0, 0, 3)}, Exists: true},
			ok:    true,
		},
		"concurrent": {
			limit:    Limit{Subject: u, Kind: Concurrent, Max: 2},
			snap:     Snapshot{Held: map[Subject]Held{u: {Count: 2}}},
			inFlight: true,
			retry:    inFlight,
			msg:      "2 calls in flight, the limit is 2",
		},
		"zero refuses all": {
			limit: Limit{Subject: u, Kind: SpendPerDay, Max: 0},
			snap:  Snapshot{},
			retry: day.AddDate(0, 0, 1).Sub(now),
			msg:   "this call alone is more than the limit",
		},
		"another subject's limit": {
			limit: Limit{Subject: Tenant("t"), Kind: SpendPerDay, Max: 1000},
			snap:  Snapshot{Buckets: []Bucket{bucket(BucketDay, day, 5000, 0, 0)}},
			ok:    true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := evaluate([]Limit{tc.limit}, &tc.snap, r, now, inFlight)
			if tc.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			d, ok := err.(*Denial)
			if !ok {
				t.Fatalf("err = %v, want a *Denial", err)
			}
			if d.InFlight != tc.inFlight || d.RetryAfter != tc.retry {
				t.Errorf("in flight %v, retry after %v; want %v, %v", d.InFlight, d.RetryAfter, tc.inFlight, tc.retry)
			}
			if !strings.Contains(d.Error(), tc.msg) {
				t.Errorf("message %q does not contain %q", d.Error(), tc.msg)
			}
		})
	}
}

// TestEvaluateWorst: of several limits broken, the denial is the one that
// lasts longest.
func TestEvaluateWorst(t *testing.T) {
	now := time.Date(2026, 11, 30, 14, 7, 30, 0, time.UTC)
	u := User("u1")
	limits := []Limit{
		{Subject: u, Kind: Concurrent, Max: 0},
		{Subject: Env("t", "e"), Kind: SpendPerMonth, Max: 0},
		{Subject: u, Kind: SpendPerDay, Max: 0},
	}
	err := evaluate(limits, &Snapshot{}, Reservation{Cost: 1}, now, time.Second)
	d, ok := err.(*Denial)
	if !ok || d.Limit.Kind != SpendPerMonth {
		t.Errorf("denial %v, want the monthly one", err)
	}
}

func TestPeriodStart(t *testing.T) {
	sun := time.Date(2026, 11, 29, 23, 59, 0, 0, time.UTC)
	start, next, _ := periodStart(SpendPerWeek, sun)
	if want := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC); !start.Equal(want) || !next.Equal(want.AddDate(0, 0, 7)) {
		t.Errorf("week of Sunday the 29th: %v – %v, want from Monday the 23rd", start, next)
	}
	start, next, _ = periodStart(SpendPerMonth, time.Date(2026, 12, 31, 23, 0, 0, 0, time.FixedZone("x", -3600)))
	if want := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC); !start.Equal(want) || !next.Equal(want.AddDate(0, 1, 0)) {
		t.Errorf("month in UTC: %v – %v, want January 2027", start, next)
	}
}

// TestWindowStart: the start of every kind's window, where a week begins
// in the month before and the rolling window in the day before.
func TestWindowStart(t *testing.T) {
	now := time.Date(2026, 12, 1, 2, 7, 30, 0, time.UTC) // a Tuesday
	for k, want := range map[Kind]time.Time{
		SpendPerDay:       time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		TokensPerDay:      time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		SpendPerWeek:      time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC),
		SpendPerMonth:     time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		SpendPer5h:        time.Date(2026, 11, 30, 21, 5, 0, 0, time.UTC),
		RequestsPerMinute: time.Date(2026, 12, 1, 2, 7, 0, 0, time.UTC),
		Concurrent:        now,
	} {
		if got := WindowStart(k, now); !got.Equal(want) {
			t.Errorf("%s: %v, want %v", k, got, want)
		}
	}
}

// TestDenialMessage: a hard limit's cut says that the response was cut off
// and, when known, when room frees up again: whoever reads it should learn
// both from the one message.
func TestDenialMessage(t *testing.T) {
	day := Limit{Subject: User("u1"), Kind: SpendPerDay, Max: 5 * int64(Dollar), Hard: true}
	midnight := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		d    Denial
		want string
	}{
		"cut, resets at midnight": {
			Denial{Limit: day, Used: 4 * int64(Dollar), Held: int64(Dollar), Need: int64(Cent), MidStream: true, Resets: midnight},
			"budget: user u1 spending limit per day reached: $4.00 used, $1.00 held by calls in flight, this call needs $0.01, the limit is $5.00; the response was cut off here; room frees up at 2026-12-02T00:00:00Z",
		},
		"cut while calls in flight hold the rest": {
			Denial{Limit: day, Used: 4 * int64(Dollar), Held: int64(Dollar), Need: int64(Cent), MidStream: true, InFlight: true},
			"budget: user u1 spending limit per day reached: $4.00 used, $1.00 held by calls in flight, this call needs $0.01, the limit is $5.00; the response was cut off here",
		},
		"refused, resets at midnight": {
			Denial{Limit: day, Used: 5 * int64(Dollar), Need: int64(Cent), Resets: midnight},
			"budget: user u1 spending limit per day reached: $5.00 used, $0.00 held by calls in flight, this call needs $0.01, the limit is $5.00; room frees up at 2026-12-02T00:00:00Z",
		},
		// Settled costs are nanodollars: the message rounds every amount
		// to the microdollar, as talkide admin budget status shows them,
		// so that they read alike.
		"amounts rounded as displays show them": {
			Denial{Limit: Limit{Subject: User("u1"), Kind: SpendPerDay, Max: int64(Dollar)},
				Used: 999_871_234, Held: 400, Need: 11_174_816, Resets: midnight},
			"budget: user u1 spending limit per day reached: $0.999871 used, <$0.000001 held by calls in flight, this call needs $0.011175, the limit is $1.00; room frees up at 2026-12-02T00:00:00Z",
		},
		"thousands": {
			Denial{Limit: Limit{Subject: Tenant("t1"), Kind: SpendPerMonth, Max: 1500 * int64(Dollar)},
				Used: 1499*int64(Dollar) + 999_999_600, Held: 2 * int64(Cent), Need: 1_500_000, Resets: midnight},
			"budget: tenant t1 spending limit per month reached: $1,500.00 used, $0.02 held by calls in flight, this call needs $0.0015, the limit is $1,500.00; room frees up at 2026-12-02T00:00:00Z",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.d.Error(); got != tc.want {
				t.Errorf("Error() =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}
