package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDelayBounds(t *testing.T) {
	tests := map[string]struct {
		p        Policy
		n        int
		min, max time.Duration
	}{
		"first":          {Policy{Base: 100 * time.Millisecond, Max: time.Second}, 0, 50 * time.Millisecond, 100 * time.Millisecond},
		"third":          {Policy{Base: 100 * time.Millisecond, Max: time.Second}, 2, 200 * time.Millisecond, 400 * time.Millisecond},
		"capped":         {Policy{Base: 100 * time.Millisecond, Max: time.Second}, 20, 500 * time.Millisecond, time.Second},
		"huge n":         {Policy{Base: time.Millisecond, Max: time.Minute}, 1000, 30 * time.Second, time.Minute},
		"zero policy":    {Policy{}, 0, DefaultBase / 2, DefaultBase},
		"max below base": {Policy{Base: time.Second, Max: time.Millisecond}, 3, 500 * time.Millisecond, time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for range 200 {
				d := tc.p.Delay(tc.n)
				if d < tc.min || d > tc.max {
					t.Fatalf("Delay(%d) = %v, want in [%v, %v]", tc.n, d, tc.min, tc.max)
				}
			}
		})
	}
}

func TestDelayJitters(t *testing.T) {
	p := Policy{Base: time.Second, Max: time.Second}
	seen := map[time.Duration]bool{}
	for range 50 {
		seen[p.Delay(0)] = true
	}
	if len(seen) < 10 {
		t.Fatalf("50 delays took only %d distinct values: no jitter", len(seen))
	}
}

func TestBackoffCountsAndResets(t *testing.T) {
	b := New(Policy{Base: 10 * time.Millisecond, Max: time.Second})
	for i := range 5 {
		if got := b.Attempts(); got != i {
			t.Fatalf("Attempts = %d, want %d", got, i)
		}
		if d := b.Next(); d < (10*time.Millisecond<<i)/2 {
			t.Fatalf("retry %d: delay %v below half of %v", i, d, 10*time.Millisecond<<i)
		}
	}
	b.Reset()
	if d := b.Next(); d > 10*time.Millisecond {
		t.Fatalf("after Reset the delay is %v, want ≤ 10ms", d)
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a cancelled context = %v, want context.Canceled", err)
	}
	if err := Sleep(context.Background(), 0); err != nil {
		t.Fatalf("Sleep(0) = %v", err)
	}
	if err := New(Policy{Base: time.Millisecond, Max: time.Millisecond}).Wait(context.Background()); err != nil {
		t.Fatalf("Wait = %v", err)
	}
}
