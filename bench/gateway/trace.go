package main

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/store"
)

// Where a request's time goes. The client numbers each request in a header
// that the gateway passes upstream; the simulator's handler notes when it
// began and ended that request. On one monotonic clock in one process this
// splits a call into the way up (client to the simulator's handler: for
// the gateway, the token check, lookup, reservation and the upstream
// request), the stream (the simulator's handler) and the way down (its
// return to the client's EOF: for the gateway, the end of the copy and
// the last chunk; the usage record is written in the background). The
// handler's first flush of body bytes splits the time to the first byte
// the same way: up, the simulator's own time to its first event (the
// request's body read and parsed), and the first event's way down (for
// the gateway, the response's head and the first read metered, filtered
// and written).

// seqHeader numbers a request within its phase.
const seqHeader = "X-Bench-Seq"

// epoch is the zero of the benchmark's clock (monotonic).
var epoch = time.Now()

func sinceEpoch() int64 { return int64(time.Since(epoch)) }

// legs holds, per request of the current phase, when the simulator's
// handler began it, first flushed body bytes, and ended it.
type legs struct {
	start, first, end []atomic.Int64
}

// tracer is the benchmark's instrumentation of the stack.
type tracer struct {
	legs  atomic.Pointer[legs]
	conns atomic.Int64 // connections the simulator accepted

	mu    sync.Mutex                 // guards calls
	calls map[string][]time.Duration // store method -> durations in this phase
}

func newTracer() *tracer { return &tracer{calls: map[string][]time.Duration{}} }

// reset starts a phase of n requests.
func (t *tracer) reset(n int) {
	t.legs.Store(&legs{start: make([]atomic.Int64, n), first: make([]atomic.Int64, n), end: make([]atomic.Int64, n)})
	t.mu.Lock()
	t.calls = map[string][]time.Duration{}
	t.mu.Unlock()
}

// takeCalls returns the store calls timed since reset.
func (t *tracer) takeCalls() map[string][]time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.calls
	t.calls = map[string][]time.Duration{}
	return c
}

func (t *tracer) time(method string, start time.Time) {
	d := time.Since(start)
	t.mu.Lock()
	t.calls[method] = append(t.calls[method], d)
	t.mu.Unlock()
}

// wrap notes when h begins and ends each numbered request.
func (t *tracer) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l := t.legs.Load()
		i, err := strconv.Atoi(r.Header.Get(seqHeader))
		if l == nil || err != nil || i < 0 || i >= len(l.start) {
			h.ServeHTTP(w, r)
			return
		}
		l.start[i].Store(sinceEpoch())
		h.ServeHTTP(&firstFlush{ResponseWriter: w, at: &l.first[i]}, r)
		l.end[i].Store(sinceEpoch())
	})
}

// firstFlush notes when a handler first flushes body bytes: just before
// the flush, so the way down counts the write that sends them.
type firstFlush struct {
	http.ResponseWriter
	at    *atomic.Int64
	wrote bool // body bytes were written since the handler began
}

func (f *firstFlush) Write(p []byte) (int, error) {
	f.wrote = f.wrote || len(p) > 0
	return f.ResponseWriter.Write(p)
}

func (f *firstFlush) FlushError() error {
	if f.wrote && f.at.Load() == 0 {
		f.at.Store(sinceEpoch())
	}
	return http.NewResponseController(f.ResponseWriter).Flush()
}

func (f *firstFlush) Flush() { f.FlushError() }

func (f *firstFlush) Unwrap() http.ResponseWriter { return f.ResponseWriter }

// connState counts the simulator's new connections.
func (t *tracer) connState(_ net.Conn, s http.ConnState) {
	if s == http.StateNew {
		t.conns.Add(1)
	}
}

// timedStore times the store calls the gateway and the budget service
// make on the way of a call: a few hundred nanoseconds of overhead each.
type timedStore struct {
	appStore
	budgetStore
	t *tracer
}

// The two interfaces the store implements, under names that can both be
// embedded.
type (
	appStore    = store.Store
	budgetStore = budget.Store
)

func (s *timedStore) GetConversation(ctx context.Context, id string) (store.Conversation, error) {
	defer s.t.time("GetConversation", time.Now())
	return s.appStore.GetConversation(ctx, id)
}

func (s *timedStore) RecordUsages(ctx context.Context, us []store.UsageRecord) error {
	defer s.t.time("RecordUsages (background)", time.Now())
	return s.appStore.RecordUsages(ctx, us)
}

func (s *timedStore) ReserveBudget(ctx context.Context, r budget.Reservation, q budget.SnapshotQuery, admit func(*budget.Snapshot, *budget.Reservation) error) error {
	defer s.t.time("ReserveBudget", time.Now())
	return s.budgetStore.ReserveBudget(ctx, r, q, admit)
}

func (s *timedStore) SettleBudget(ctx context.Context, e budget.Entry) (bool, error) {
	defer s.t.time("SettleBudget (background)", time.Now())
	return s.budgetStore.SettleBudget(ctx, e)
}

func (s *timedStore) SettleBudgetBatch(ctx context.Context, es []budget.Entry, lease *budget.SliceSize) ([]bool, error) {
	defer s.t.time("SettleBudgetBatch (background)", time.Now())
	return s.budgetStore.SettleBudgetBatch(ctx, es, lease)
}

func (s *timedStore) BudgetLimits(ctx context.Context, subjects ...budget.Subject) ([]budget.Limit, error) {
	defer s.t.time("BudgetLimits", time.Now())
	return s.budgetStore.BudgetLimits(ctx, subjects...)
}
