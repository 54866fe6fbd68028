// Package fakeclock provides a clock for tests: it stands still until the
// test moves it, so that expiries, lifetimes and rate windows are checked
// at exact instants instead of by sleeping. Code under test takes its
// Now method where it would take time.Now.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a settable time source, safe for concurrent use: the code under
// test usually reads it from other goroutines than the test that moves it.
type Clock struct {
	mu  sync.Mutex
	now time.Time // guarded by mu
}

// New returns a clock that reads t0 until it is moved.
func New(t0 time.Time) *Clock { return &Clock{now: t0} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d (back, for a negative d).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
