package postgres

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/store/postgres/pgtest"
)

// TestRateWindowsAcrossPools: hits of one window sent at once from two
// stores (two replicas' pools) on one database each count once: the counts
// returned are 1 to n, each once. Windows, keys and limits are apart;
// a sweep deletes only the windows that started before its time.
func TestRateWindowsAcrossPools(t *testing.T) {
	ctx := t.Context()
	dsn := pgtest.URL(t)
	a, b := open(t, dsn), open(t, dsn)
	w0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	w1 := w0.Add(time.Minute)

	const n = 60
	counts := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			c, err := s.HitRate(ctx, "token", "tk1", w0)
			if err != nil {
				t.Error(err)
			}
			counts[i] = c
		})
	}
	wg.Wait()
	slices.Sort(counts)
	for i, c := range counts {
		if c != int64(i+1) {
			t.Fatalf("concurrent hits returned %v, want 1..%d each once", counts, n)
		}
	}
	for _, tc := range []struct {
		name, key string
		start     time.Time
		want      int64
	}{
		{"token", "tk1", w0, n},
		{"token", "tk1", w1, 0},
		{"token", "tk2", w0, 0},
		{"login", "tk1", w0, 0},
	} {
		if got, err := b.RateHits(ctx, tc.name, tc.key, tc.start); err != nil || got != tc.want {
			t.Errorf("RateHits(%s, %s, %v) = %d, %v; want %d", tc.name, tc.key, tc.start, got, err, tc.want)
		}
	}
	if c, err := b.HitRate(ctx, "token", "tk1", w1); err != nil || c != 1 {
		t.Errorf("the next window's first hit: %d, %v", c, err)
	}
	if c, err := a.HitRate(ctx, "login", "tk1", w0); err != nil || c != 1 {
		t.Errorf("another limit's first hit: %d, %v", c, err)
	}
	if d, err := a.SweepRates(ctx, w1); err != nil || d != 2 {
		t.Errorf("SweepRates(w1) deleted %d, %v; want the two rows of w0", d, err)
	}
	if got, _ := a.RateHits(ctx, "token", "tk1", w1); got != 1 {
		t.Errorf("w1 after the sweep: %d, want 1", got)
	}
}
