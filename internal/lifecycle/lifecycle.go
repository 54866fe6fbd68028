// Package lifecycle owns the parts of a long-running role (a store, a
// listener, a background loop): they are added in the order they start,
// and Stop ends them in reverse, waiting for every goroutine the group
// started, so that nothing a part needs is closed under it (a sweeper
// never meets a closed store) and nothing is left running after Stop.
//
// A goroutine that fails while the role runs is its fatal error: Fatal
// delivers the first, and the role stops, rather than serving on without
// the part (a listener whose Serve returned).
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// straggleWait is how long Stop still waits for a cancelled goroutine
// once its context is done.
const straggleWait = 5 * time.Second

// Group is a role's parts, in the order they started. The zero value is
// ready to use; a Group is safe for concurrent use.
type Group struct {
	mu      sync.Mutex
	parts   []part // guarded by mu
	stopped bool   // guarded by mu

	fatalOnce sync.Once
	fatal     chan error // buffered: the first fatal error
	initOnce  sync.Once
}

// part is one stop step: a function to call, or a goroutine to cancel and
// wait for.
type part struct {
	name   string
	stop   func(context.Context) error
	cancel context.CancelFunc
	done   chan struct{}
}

func (g *Group) init() {
	g.initOnce.Do(func() { g.fatal = make(chan error, 1) })
}

// Defer adds a stop step; Stop runs the steps in reverse order of their
// addition, each with Stop's context. Added after Stop, it runs at once.
func (g *Group) Defer(name string, stop func(ctx context.Context) error) {
	g.mu.Lock()
	if !g.stopped {
		g.parts = append(g.parts, part{name: name, stop: stop})
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	stop(context.Background())
}

// Go runs fn in a goroutine the group owns. Stop, when it reaches this
// part (after the parts added later are stopped), cancels fn's context and
// waits for fn to return. An error fn returns before then, other than its
// context's, is the group's fatal error.
func (g *Group) Go(name string, fn func(ctx context.Context) error) {
	g.init()
	ctx, cancel := context.WithCancel(context.Background())
	p := part{name: name, cancel: cancel, done: make(chan struct{})}
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		cancel()
		return
	}
	g.parts = append(g.parts, p)
	g.mu.Unlock()
	go func() {
		defer close(p.done)
		err := fn(ctx)
		if err != nil && ctx.Err() == nil {
			g.fail(fmt.Errorf("%s: %w", name, err))
		}
	}()
}

// fail records err as the fatal error unless one was recorded.
func (g *Group) fail(err error) {
	g.init()
	g.fatalOnce.Do(func() { g.fatal <- err })
}

// Fatal delivers the first error of a goroutine that failed while the
// group ran.
func (g *Group) Fatal() <-chan error {
	g.init()
	return g.fatal
}

// Stop ends every part in reverse order of addition. A goroutine is
// waited for until ctx ends, and a few seconds more; one still running
// then is named in the error
// (and left: nothing can end a goroutine from outside). The first fatal
// error, if any, is not part of Stop's error: Fatal has it.
func (g *Group) Stop(ctx context.Context) error {
	g.mu.Lock()
	parts := g.parts
	g.parts, g.stopped = nil, true
	g.mu.Unlock()
	var errs []error
	for i := len(parts) - 1; i >= 0; i-- {
		p := parts[i]
		if p.stop != nil {
			if err := p.stop(ctx); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p.name, err))
			}
			continue
		}
		p.cancel()
		select {
		case <-p.done:
		case <-ctx.Done():
			// A goroutine ends soon after its cancel, even when the grace
			// is used up (a second Ctrl-C): it gets straggleWait more.
			t := time.NewTimer(straggleWait)
			select {
			case <-p.done:
			case <-t.C:
				// Wait no more for this one, but still stop what it runs
				// on top of: the others may end on their own.
				errs = append(errs, fmt.Errorf("%s: still running when the shutdown's time was over", p.name))
			}
			t.Stop()
		}
	}
	return errors.Join(errs...)
}
