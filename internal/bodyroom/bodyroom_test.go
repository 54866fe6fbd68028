package bodyroom

import (
	"errors"
	"sync"
	"testing"
)

func TestTakeAndGive(t *testing.T) {
	r := New(100, 60)
	steps := []struct {
		take bool
		key  string
		n    int64
		want error
	}{
		{true, "ana", 50, nil},
		{true, "ana", 11, ErrKeyFull}, // her share is 60
		{true, "ana", 10, nil},
		{true, "ben", 41, ErrFull}, // 60 of 100 held
		{true, "ben", 40, nil},
		{true, "cyd", 1, ErrFull},
		{false, "ana", 60, nil},
		{true, "cyd", 60, nil},
		{true, "ben", 1, ErrFull},
		{false, "ben", 40, nil},
		{false, "cyd", 60, nil},
		{true, "ben", 60, nil},
	}
	for i, s := range steps {
		if !s.take {
			r.Give(s.key, s.n)
			continue
		}
		if err := r.Take(s.key, s.n); !errors.Is(err, s.want) {
			t.Fatalf("step %d: Take(%q, %d) = %v, want %v", i, s.key, s.n, err, s.want)
		}
	}
	if used, peak := r.State(); used != 60 || peak != 100 {
		t.Fatalf("State() = %d, %d; want 60, 100", used, peak)
	}
	r.Give("ben", 60)
	if len(r.byKey) != 0 {
		t.Fatalf("keys left with nothing held: %v", r.byKey)
	}
}

func TestNoShareOfItsOwn(t *testing.T) {
	r := New(10, 0)
	if err := r.Take("", 10); err != nil {
		t.Fatal(err)
	}
	if err := r.Take("other", 1); !errors.Is(err, ErrFull) {
		t.Fatalf("Take beyond the total = %v, want ErrFull", err)
	}
	if total, perKey := r.Limits(); total != 10 || perKey != 0 {
		t.Fatalf("Limits() = %d, %d", total, perKey)
	}
}

func TestNilBoundsNothing(t *testing.T) {
	r := New(-1, 5)
	if r != nil {
		t.Fatal("New with a negative total returned a bound")
	}
	if err := r.Take("k", 1<<40); err != nil {
		t.Fatal(err)
	}
	r.Give("k", 1<<40)
	if used, peak := r.State(); used != 0 || peak != 0 {
		t.Fatalf("State() = %d, %d", used, peak)
	}
	if total, _ := r.Limits(); total != -1 {
		t.Fatalf("Limits() total = %d, want -1", total)
	}
}

// TestConcurrentUse takes and gives from many goroutines: the room never
// holds more than its total, nor a key more than its share, and all of it
// is back at the end.
func TestConcurrentUse(t *testing.T) {
	const total, share = 1000, 300
	r := New(total, share)
	keys := []string{"a", "b", "c", "d"}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			key := keys[g%len(keys)]
			for i := range 2000 {
				n := int64(1 + (g*7+i*13)%120)
				if r.Take(key, n) != nil {
					continue
				}
				r.mu.Lock()
				bad := r.used > total || r.byKey[key] > share
				r.mu.Unlock()
				if bad {
					t.Error("a bound was exceeded")
				}
				r.Give(key, n)
			}
		})
	}
	wg.Wait()
	if used, peak := r.State(); used != 0 || peak > total {
		t.Fatalf("State() = %d, %d after all gave back", used, peak)
	}
}
