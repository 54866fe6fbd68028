package worker

import (
	"context"
	"errors"
	"sync"
)

// errShuttingDown refuses new turns during Shutdown.
var errShuttingDown = errors.New("worker is shutting down")

// errBusy refuses a turn beyond the bound on running turns: before the
// turn starts, so that nothing of it is recorded and the client may send
// the message again.
var errBusy = errors.New("worker runs its most turns at once")

// turnGate admits turns and counts the running ones, so that Shutdown can
// refuse new turns, wait for those still running, and then cut them off.
// Sessions hold it instead of their worker: its lock is a leaf (taken under
// a session's lock by send and under the worker's by session, and nothing
// is locked while it is held), so no lock order ties the two together.
type turnGate struct {
	// base is the parent of every turn's context; the worker cancels it at
	// the end of Shutdown's grace period.
	base context.Context

	// max bounds the running turns; 0: no bound.
	max int

	// ended is signalled (never closed) by each turn that ends once the
	// gate is closing: a drain hands that turn's conversation over then,
	// not after the longest turn of the replica. Made with the gate.
	ended chan struct{}

	mu sync.Mutex
	// guarded by mu
	closed  bool
	running int
	idle    chan struct{} // made by close; closed once closed and running == 0
}

func newTurnGate(base context.Context, max int) *turnGate {
	return &turnGate{base: base, max: max, ended: make(chan struct{}, 1)}
}

// begin admits a turn and returns its context, errShuttingDown once the
// gate is closing, or errBusy when max turns run. An admitted turn calls
// end when it is over.
func (g *turnGate) begin() (context.Context, context.CancelFunc, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, nil, errShuttingDown
	}
	if g.max > 0 && g.running >= g.max {
		return nil, nil, errBusy
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
	if !g.closed {
		return
	}
	if g.running == 0 {
		close(g.idle)
	}
	select {
	case g.ended <- struct{}{}:
	default: // one signal pending covers every turn that ended before it is read
	}
}

// turnEnded is signalled when a turn ends while the gate is closing.
func (g *turnGate) turnEnded() <-chan struct{} { return g.ended }

// full reports whether a turn begun now would be refused as errBusy: a
// command that would start a turn is refused before its session is
// opened, which costs files and a lease.
func (g *turnGate) full() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.max > 0 && g.running >= g.max
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
