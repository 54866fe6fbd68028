package chatclient

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
)

// watchedBuffer is an output the test waits on: each write wakes waitFor.
type watchedBuffer struct {
	mu      sync.Mutex // guards b and changed
	b       bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newWatchedBuffer() *watchedBuffer { return &watchedBuffer{changed: make(chan struct{})} }

func (w *watchedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.changed)
	w.changed = make(chan struct{})
	return w.b.Write(p)
}

func (w *watchedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// waitFor returns once the output holds s n times, failing the test when
// ctx ends first.
func (w *watchedBuffer) waitFor(ctx context.Context, t *testing.T, s string, n int) {
	t.Helper()
	for {
		w.mu.Lock()
		got, changed := w.b.String(), w.changed
		w.mu.Unlock()
		if strings.Count(got, s) >= n {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("output never held %q %d times:\n%s", s, n, got)
		}
	}
}
