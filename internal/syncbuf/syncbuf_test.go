package syncbuf

import (
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
