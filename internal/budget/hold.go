package budget

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/talkide/platform/internal/backoff"
)

// Hold is an admitted call: what it holds, until Settle charges what it
// cost. Check and Settle are called by the goroutine serving the call; the
// service's renewer runs beside them.
type Hold struct {
	s     *Service
	call  Call
	price Price    // of the requested model
	est   estimate // the reservation's first size
	hard  []Limit  // the hard spending limits that apply

	tracked bool   // a reservation of its own is stored
	slice   *slice // admitted from this slice (lease.go); nil: not

	mu       sync.Mutex
	reserved Money // guarded by mu; what the reservation holds
	tokens   int64 // guarded by mu

	once sync.Once
}

// Reserved returns what the call holds now.
func (h *Hold) Reserved() Money {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reserved
}

// Hard reports whether a hard limit applies: the caller should Check the
// running usage of a stream as it passes.
func (h *Hold) Hard() bool { return len(h.hard) > 0 && h.tracked }

// Check keeps the reservation ahead of a stream's running usage u (the
// input from message_start, the output so far). While the cost of u plus
// Options.HardStopMargin output tokens fits the reservation it does nothing;
// otherwise it tries to extend the reservation, and returns a *Denial when a
// hard limit refuses: the stream must be cut off. Other errors (the store
// failed) leave the stream running. Without a hard limit it always returns
// nil.
func (h *Hold) Check(ctx context.Context, u Usage) error {
	if h.Covers(u) {
		return nil
	}
	need, cur := h.need(u), h.Reserved()
	// Extend with room to spare, so that a long stream extends seldom; when
	// that does not fit, by exactly what is needed.
	err := h.s.extend(ctx, h, need+max(h.est.Cost/2, need-cur))
	if _, denied := errors.AsType[*Denial](err); denied {
		err = h.s.extend(ctx, h, need)
	}
	if d, denied := errors.AsType[*Denial](err); denied {
		d.MidStream = true
		return d
	}
	if err != nil {
		h.s.log.WarnContext(ctx, "budget: extend reservation", "id", h.call.ID, "user", h.call.User, "err", err.Error())
	}
	return nil
}

// Covers reports whether Check of u would return nil without calling the
// store: no hard limit applies, or the reservation already covers u and
// the margin. A stream is checked at every event and nearly always is
// covered; the caller can then skip what it prepares for a store call (a
// deadline, say).
func (h *Hold) Covers(u Usage) bool {
	return !h.Hard() || h.need(u) <= h.Reserved()
}

// need is what the reservation must hold for the running usage u: its
// cost with HardStopMargin more output tokens.
func (h *Hold) need(u Usage) Money {
	ahead := u
	ahead.OutputTokens += h.s.o.HardStopMargin
	return h.priceOf(u.Model).Cost(ahead)
}

func (h *Hold) priceOf(model string) Price {
	if model == "" || model == h.call.Model {
		return h.price
	}
	p, _ := h.s.prices.Lookup(model)
	return p
}

// Settlement is how a call ended.
type Settlement struct {
	Usage          // as reported; Model empty: the requested model
	Status    int  // upstream HTTP status; 0 when none came
	Streamed  bool //
	Estimated bool // part of Usage is an estimate (see docs/budgets.md)
}

// Settle charges the call its cost and releases the rest of its
// reservation. Only the first call counts. The ledger write happens in the
// background (Service.Flush waits for it); until it is done the reservation
// still holds the call's money, so nothing can overspend meanwhile. A
// failing write is retried; a settlement never charges twice.
func (h *Hold) Settle(st Settlement) {
	h.once.Do(func() { h.s.settle(h, st) })
}

func (s *Service) settle(h *Hold, st Settlement) {
	c := h.call
	u := st.Usage
	if u.Model == "" {
		u.Model = c.Model
	}
	p, known := s.prices.Lookup(u.Model)
	if !known && u.Model != "" {
		s.mu.Lock()
		first := !s.unknown[u.Model]
		s.unknown[u.Model] = true
		s.mu.Unlock()
		if first {
			s.log.Warn("budget: model has no price; charging the fallback model's", "model", u.Model, "fallback", s.prices.Fallback())
		}
	}
	e := Entry{
		ID: c.ID, Tenant: c.Tenant, Env: c.Env, User: c.User, Conversation: c.Conversation,
		Usage: u, Cost: p.Cost(u), Reserved: h.Reserved(), RequestBytes: c.RequestBytes,
		Status: st.Status, Streamed: st.Streamed, Estimated: st.Estimated,
		StartedAt: c.StartedAt, SettledAt: s.now(),
	}
	s.mu.Lock()
	// Only users with limits have a history (Reserve makes it); the others'
	// calls are in the ledger, which seeds a history when one is needed.
	if hist := s.history[c.User]; hist != nil && observable(e) {
		defer hist.observe(u, p, c.RequestBytes)
	}
	delete(s.live, c.ID)
	closed := s.closed
	if !closed {
		s.settling.Add(1)
	}
	s.mu.Unlock()
	q := &s.queue
	if h.slice != nil {
		h.slice.settled(amount{e.Reserved, h.tokens}, e)
		q = &h.slice.queue
	}
	if closed {
		s.writeBatch(context.Background(), q.slice, []Entry{e})
		return
	}
	// A call with a reservation of its own holds it until its settlement
	// is written: that one is not kept waiting for company (linger).
	s.enqueue(q, e, h.tracked)
}

// settleQueue holds settlements waiting to be written. One goroutine at a
// time writes them, in batches: what settles while a batch is being
// written goes into the next, so that under load a transaction carries
// many settlements instead of each waiting for its own.
type settleQueue struct {
	slice *slice // nil: calls with reservations of their own, or none

	mu      sync.Mutex
	pending []Entry // guarded by mu
	running bool    // guarded by mu; a goroutine is writing
	// urgent counts the pending entries of calls with a reservation of
	// their own, which holds until it is written: while there is one,
	// the writer does not linger. Guarded by mu.
	urgent int
}

func (q *settleQueue) empty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending) == 0 && !q.running
}

// enqueue adds e to q and starts q's writer if none is running. The caller
// has counted e in s.settling.
func (s *Service) enqueue(q *settleQueue, e Entry, urgent bool) {
	q.mu.Lock()
	q.pending = append(q.pending, e)
	if urgent {
		q.urgent++
	}
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		go s.drain(q)
	}
}

// settleLinger is how long a writer waits for more settlements before it
// writes a batch that is not full, unless one of them is of a call with a
// reservation of its own (which holds its money, or its place under a
// concurrency limit, until written). A slice's calls' money moved from
// the slice in memory when they settled (slice.settled), and a call
// without a limit holds nothing, so the wait changes no admission; it makes one transaction carry the settlements of
// several calls even when calls come one at a time (bench/gateway: one
// SQLite transaction per call was a sixth of the control-plane's CPU per
// call with one stream), and keeps the writer's goroutine, and its grown
// stack, from being started again for every call. Flush ends it.
//
// 200 ms: at a model's pace (64 streams, bench/gateway) calls end about
// 100 a second, so 10 ms held one settlement a batch and SQLite's page
// writes per transaction were a tenth of the control-plane's CPU; 50 ms
// held several and cut the control-plane's CPU per call by a seventh, and
// 200 ms (with the usage records' wait) by another 7 % at 64 streams
// (one run; with one stream the CPU moved within the noise, the time to
// the first byte by 0.025 ms at the median). What it costs: a process
// killed without Close loses the settlements of the last 200 ms of
// calls, calls whose money the slice had already let go (undercharged,
// never overcharged; docs/budgets.md).
const settleLinger = 200 * time.Millisecond

// drain writes q's settlements until none is left.
func (s *Service) drain(q *settleQueue) {
	for {
		s.linger(q)
		q.mu.Lock()
		n := min(len(q.pending), maxBatch)
		if n == 0 {
			q.pending, q.running = nil, false
			q.mu.Unlock()
			return
		}
		es := q.pending[:n:n]
		q.pending = q.pending[n:]
		if len(q.pending) == 0 {
			q.urgent = 0
		}
		q.mu.Unlock()
		s.writeBatch(s.bg, q.slice, es)
		s.settling.Add(-n)
	}
}

// linger waits, up to settleLinger, for q to fill a batch, unless a Flush
// waits or the service stops.
func (s *Service) linger(q *settleQueue) {
	q.mu.Lock()
	full := len(q.pending) >= maxBatch
	urgent := q.urgent > 0
	q.mu.Unlock()
	if full || urgent || s.flushing.Load() > 0 {
		return
	}
	s.mu.Lock()
	kick := s.kick
	s.mu.Unlock()
	t := time.NewTimer(settleLinger)
	defer t.Stop()
	select {
	case <-t.C:
	case <-kick:
	case <-s.bg.Done():
	}
}

// writeBatch stores ledger entries, retrying with backoff for about a
// minute or until ctx ends. The entries of a slice's calls move their cost
// from the slice to the ledger. A batch of several that fails is written
// again entry by entry, so that one entry the store refuses neither holds
// up nor loses the others.
func (s *Service) writeBatch(ctx context.Context, l *slice, es []Entry) {
	if len(es) > 1 {
		applied, err := s.attempt(ctx, l, es)
		if err == nil {
			s.written(es, applied)
			return
		}
		s.log.Warn("budget: settlement batch failed; writing its entries one by one", "batch", BatchName(es, nil), "err", err.Error())
		var failed []Entry
		for _, e := range es {
			one := []Entry{e}
			applied, err := s.attempt(ctx, l, one)
			if err != nil {
				failed = append(failed, e)
				continue
			}
			s.written(one, applied)
		}
		for _, e := range failed { // the good ones first, then the retries
			s.writeBatch(ctx, l, []Entry{e})
		}
		return
	}
	bo := backoff.New(settleBackoff)
	deadline := time.Now().Add(settleRetryFor)
	for {
		applied, err := s.attempt(ctx, l, es)
		if err == nil {
			s.written(es, applied)
			return
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			s.lost(l, es, err)
			return
		}
		s.log.Warn("budget: settle, retrying", "batch", BatchName(es, nil), "err", err.Error())
		bo.Wait(ctx) // ctx's end is seen by the next round
	}
}

// A failing settlement is retried for settleRetryFor, its pauses growing
// from 50 ms to 5 s: a database that restarts within the minute loses no
// charge, and one that is down for longer is not hammered.
const settleRetryFor = time.Minute

var settleBackoff = backoff.Policy{Base: 50 * time.Millisecond, Max: 5 * time.Second}

// written calls Options.Settled for the entries the ledger did not hold.
func (s *Service) written(es []Entry, applied []bool) {
	if s.o.Settled == nil {
		return
	}
	for i, e := range es {
		if applied[i] {
			s.o.Settled(e)
		}
	}
}

// lost gives up on es, whose last write failed with err.
func (s *Service) lost(l *slice, es []Entry, err error) {
	if l != nil {
		// As if written: the slice admits nothing from their money (the
		// write may have been committed, and then the reservation is
		// smaller already), and its next write sets the reservation's
		// size again.
		sum := costs(es)
		l.write.Lock()
		l.mu.Lock()
		l.granted = l.granted.minus(sum).floor()
		l.unwritten = l.unwritten.minus(sum)
		l.stale = true
		l.mu.Unlock()
		l.write.Unlock()
	}
	for _, e := range es {
		s.log.Error("budget: settlement lost; the call goes uncharged", "id", e.ID, "user", e.User,
			"tenant", e.Tenant, "env", e.Env, "conversation", e.Conversation, "cost", e.Cost.String(), "err", err.Error())
	}
}

// costs sums what entries cost, in money and tokens.
func costs(es []Entry) amount {
	var sum amount
	for _, e := range es {
		sum = sum.plus(amount{e.Cost, e.Usage.Tokens()})
	}
	return sum
}

// attempt makes one attempt at writing es, bounded to settleAttempt.
func (s *Service) attempt(ctx context.Context, l *slice, es []Entry) ([]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, settleAttempt)
	defer cancel()
	return s.writeOnce(ctx, l, es)
}

// writeOnce makes one attempt at writing es.
func (s *Service) writeOnce(ctx context.Context, l *slice, es []Entry) ([]bool, error) {
	if l == nil {
		return s.store.SettleBudgetBatch(ctx, es, nil)
	}
	// The slice's reservation, written with its absolute size, shrinks by
	// what the entries cost: their money is in the buckets from now on.
	sum := costs(es)
	l.write.Lock()
	defer l.write.Unlock()
	next := l.settledSize(sum)
	applied, err := s.store.SettleBudgetBatch(ctx, es, &SliceSize{ID: l.id, Cost: next.cost, Tokens: next.tokens})
	if err == nil {
		l.mu.Lock()
		l.granted = next
		l.unwritten = l.unwritten.minus(sum)
		l.stale = false
		l.mu.Unlock()
	}
	return applied, err
}
