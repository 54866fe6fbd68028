package fakeclock

import (
	"sync"
	"testing"
	"time"
)

func TestClock(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	c := New(t0)
	if !c.Now().Equal(t0) || !c.Now().Equal(t0) {
		t.Fatalf("Now = %v, want %v while nothing moves it", c.Now(), t0)
	}
	c.Advance(90 * time.Second)
	if want := t0.Add(90 * time.Second); !c.Now().Equal(want) {
		t.Errorf("after Advance: %v, want %v", c.Now(), want)
	}
	c.Advance(-time.Hour)
	if want := t0.Add(90*time.Second - time.Hour); !c.Now().Equal(want) {
		t.Errorf("after a negative Advance: %v, want %v", c.Now(), want)
	}
	c.Set(t0)
	if !c.Now().Equal(t0) {
		t.Errorf("after Set: %v, want %v", c.Now(), t0)
	}
}

// Readers and movers at once (run with -race): every reading is one the
// moves produced.
func TestClockConcurrent(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	c := New(t0)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 1000 {
				c.Advance(time.Second)
			}
		}()
		go func() {
			defer wg.Done()
			for range 1000 {
				if d := c.Now().Sub(t0); d < 0 || d > 4000*time.Second || d%time.Second != 0 {
					t.Errorf("read %v after t0", d)
					return
				}
			}
		}()
	}
	wg.Wait()
	if want := t0.Add(4000 * time.Second); !c.Now().Equal(want) {
		t.Errorf("after all moves: %v, want %v", c.Now(), want)
	}
}
