package worker

import (
	"context"
	"errors"
	"sync"
)

// errShuttingDown refuses new turns during Shutdown.
var errShuttingDown = errors.New("worker is shutting down")

// turnGate admits turns and counts the running ones, so that Shutdown can
// refuse new turns, wait for those still running, and then cut them off.
// Sessions hold it instead of their worker: its lock is a leaf (taken under
// a session's lock by send and under the worker's by session, and nothing
// is locked while it is held), so no lock order ties the two together.
type turnGate struct {
	// base is the parent of every turn's context; the worker cancels it at
	// the end of Shutdown's grace period.
	base context.Context

	mu sync.Mutex
	// guarded by mu
	closed  bool
	running int
	idle    chan struct{} // made by close; closed once closed and running == 0
}

func newTurnGate(base context.Context) *turnGate { return &turnGate{base: base} }

// begin admits a turn and returns its context, or errShuttingDown once the
// gate is closing. An admitted turn calls end when it is over.
func (g *turnGate) begin() (context.Context, context.CancelFunc, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, nil, errShuttingDown
	}
	g.running++
	ctx, cancel := context.WithCancel(g.base)
	return ctx, cancel, nil
}

// end records that a turn begin admitted is over.
func (g *turnGate) end() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running--
	if g.closed && g.running == 0 {
		close(g.idle)
	}
}

// closing reports whether close has been called.
func (g *turnGate) closing() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// close refuses every later turn. The channel it returns is closed once no
// admitted turn runs any more; later calls return the same channel.
func (g *turnGate) close() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed = true
		g.idle = make(chan struct{})
		if g.running == 0 {
			close(g.idle)
		}
	}
	return g.idle
}
