package syncbuf

import (
	"context"
	"strings"
	"sync"
	"testing"
)

// TestConcurrentWrites is for the race detector as much as for the count:
// every write is kept whole while another goroutine reads.
func TestConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("line\n"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := strings.Count(b.String(), "line\n"); got != 800 {
		t.Errorf("%d lines, want 800", got)
	}
}

func TestWait(t *testing.T) {
	var b Buffer
	go func() {
		for _, s := range []string{"one ", "two ", "three"} {
			b.Write([]byte(s))
		}
	}()
	got, err := b.Wait(t.Context(), func(s string) bool { return strings.Contains(s, "three") })
	if err != nil || got != "one two three" {
		t.Fatalf("Wait = %q, %v", got, err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if got, err := b.Wait(ctx, func(s string) bool { return strings.Contains(s, "four") }); err != context.Canceled || got != "one two three" {
		t.Errorf("Wait after the context ended = %q, %v", got, err)
	}
}
