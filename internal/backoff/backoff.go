// Package backoff is the platform's one retry delay: exponential growth
// with jitter, capped, and a context-aware wait. Every retry loop (the
// report outbox, the session flush, the stream relay, the usage recorder,
// the chat client) takes its pauses from here, so that a fleet of clients
// cut off together does not come back together.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy describes the delays of a retry loop. The zero value is usable:
// Base defaults to 100 ms and Max to 30 s.
type Policy struct {
	// Base is the delay before the first retry (before jitter).
	Base time.Duration
	// Max caps the delay (before jitter).
	Max time.Duration
}

// Default values of a zero Policy.
const (
	DefaultBase = 100 * time.Millisecond
	DefaultMax  = 30 * time.Second
)

func (p Policy) bounds() (base, maxD time.Duration) {
	base, maxD = p.Base, p.Max
	if base <= 0 {
		base = DefaultBase
	}
	if maxD <= 0 {
		maxD = DefaultMax
	}
	return base, max(base, maxD)
}

// Delay returns the wait before retry n (0-based): Base·2ⁿ capped at Max,
// scaled by a random factor in [0.5, 1]. Half the delay is jitter: enough
// to spread clients that failed at the same instant, while the lower bound
// still backs off.
func (p Policy) Delay(n int) time.Duration {
	base, maxD := p.bounds()
	d := base
	for i := 0; i < n && d < maxD; i++ {
		d *= 2
	}
	d = min(d, maxD)
	return d/2 + rand.N(d/2+1)
}

// Backoff is the state of one retry loop: how many retries have failed
// in a row. It is not safe for concurrent use; each loop owns its own.
type Backoff struct {
	Policy
	n int
}

// New returns a Backoff with policy p.
func New(p Policy) *Backoff { return &Backoff{Policy: p} }

// Next returns the delay before the next retry and counts it.
func (b *Backoff) Next() time.Duration {
	d := b.Delay(b.n)
	if b.n < 64 {
		b.n++
	}
	return d
}

// Attempts is the number of delays handed out since the last Reset.
func (b *Backoff) Attempts() int { return b.n }

// Reset starts over after a success.
func (b *Backoff) Reset() { b.n = 0 }

// Wait sleeps for the next delay, or until ctx ends, and then returns
// ctx's error if it ended.
func (b *Backoff) Wait(ctx context.Context) error {
	return Sleep(ctx, b.Next())
}

// Sleep waits d or until ctx ends, whichever is first; it returns ctx's
// error when ctx ended first.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
