// Package syncbuf is a buffer that goroutines may write while another reads
// it, or waits until it holds what it expects: a test's log sink, or the
// output of a process or a build it follows.
package syncbuf

import (
	"bytes"
	"context"
	"sync"
)

// Buffer is a bytes.Buffer behind a mutex. The zero value is empty and
// ready.
type Buffer struct {
	mu      sync.Mutex
	b       bytes.Buffer  // guarded by mu
	changed chan struct{} // guarded by mu; closed at the next write, made by a waiter
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
	return b.b.Write(p)
}

// String returns what has been written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Wait returns once what has been written satisfies done, looking again
// after each write. When ctx ends first, it returns ctx's error and what
// had been written.
func (b *Buffer) Wait(ctx context.Context, done func(written string) bool) (string, error) {
	for {
		b.mu.Lock()
		got := b.b.String()
		if done(got) {
			b.mu.Unlock()
			return got, nil
		}
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		changed := b.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return got, ctx.Err()
		}
	}
}
