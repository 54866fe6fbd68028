// Package inflight counts work in flight and lets a caller wait until none
// is left. Unlike sync.WaitGroup, work may begin (the count rise from
// zero) while someone waits: a service that flushes, or stops, beside
// requests that go on arriving cannot order every Add before its Wait, and
// a WaitGroup used so is a data race.
package inflight

import "sync"

// Count is a count of work in flight. The zero value counts none.
type Count struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n last fell to zero; made when it rises from zero
}

// closed is the Idle of a count that has none in flight.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Add counts n more (n < 0: fewer). It panics if the count would fall
// below zero, as that is a Done without its Add.
func (c *Count) Add(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.n+n < 0:
		panic("inflight: negative count")
	case c.n == 0 && n > 0:
		c.idle = make(chan struct{})
	}
	c.n += n
	if c.n == 0 && n < 0 {
		close(c.idle)
	}
}

// Done counts one fewer.
func (c *Count) Done() { c.Add(-1) }

// Idle returns a channel that is closed once the count is zero: at once
// if it is, or when the work in flight, and any begun before that ends,
// has ended.
func (c *Count) Idle() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		return closed
	}
	return c.idle
}

// Wait waits until Idle is closed.
func (c *Count) Wait() { <-c.Idle() }
