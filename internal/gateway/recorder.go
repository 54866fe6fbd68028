package gateway

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/store"
)

// Usage records are written off the call's path: finish hands each record
// to the gateway's recorder and returns, and a writer goroutine stores the
// records in batches. What charges a call is the budget ledger, settled on
// its own (budgets.md); the usage record may appear shortly after the call
// ended.

const (
	// recordBatch is the most records one store write takes.
	recordBatch = 256
	// recordQueue is how many records may wait for the writer. A call
	// that finds the queue full waits for room: a record is never dropped
	// for want of memory.
	recordQueue = 4096
	// recordRetryFor is how long a failing write is retried before its
	// records are logged as lost, as the budget's settlements are.
	recordRetryFor = time.Minute
	// recordTimeout bounds one attempt to write a batch.
	recordTimeout = 10 * time.Second
	// recordLinger is how long the writer waits for more records before it
	// writes a batch that is not full, unless a Flush or Close waits: with
	// calls one at a time, a transaction per call was most of what the
	// recorder cost (bench/gateway), and a writer started again for each
	// call grew its stack again each time. 200 ms, not 10, for streams at
	// a model's pace, which end about 100 calls a second: 10 ms held one
	// record a batch (the budget's settleLinger, which waits as long, says
	// more). A process killed without a graceful stop loses the records
	// of its last 200 ms of calls.
	recordLinger = 200 * time.Millisecond
)

// recordBackoff spaces the retries of a failing write: from 50 ms, so that
// a passing lock conflict costs little, up to 5 s, so that a store that is
// down is not hammered for the minute the retries last.
var recordBackoff = backoff.Policy{Base: 50 * time.Millisecond, Max: 5 * time.Second}

// pending is a usage record waiting to be written, with what its log line
// says besides the record.
type pending struct {
	ctx context.Context // the call's, without its cancellation: for the log line only
	rec store.UsageRecord

	path      string       // the upstream path
	held      bool         // the call had a budget hold: reserved (and estimated, cut) are logged
	reserved  budget.Money // what the hold held at the call's end
	estimated bool         // the charge is partly an estimate
	cut       string       // why a hard limit cut the stream; "" when it did not
	err       string       // why the upstream was not reached; "" when it was
}

// logLine returns the attributes of p's log line, appended to buf. They
// are built here, off the call's path, as slog.Attrs (no value is boxed).
func (p *pending) logLine(buf []slog.Attr) []slog.Attr {
	r := &p.rec
	buf = append(buf,
		slog.String("id", r.ID),
		slog.String("tenant", r.Tenant),
		slog.String("env", r.Env),
		slog.String("conversation", r.ConversationID),
		slog.String("user", r.UserID),
		slog.String("path", p.path),
		slog.String("model", r.Model),
		slog.Int("status", r.Status),
		slog.Bool("streamed", r.Streamed),
		slog.Int64("input_tokens", r.InputTokens),
		slog.Int64("output_tokens", r.OutputTokens),
		slog.Int64("cache_creation_input_tokens", r.CacheCreationInputTokens),
		slog.Int64("cache_read_input_tokens", r.CacheReadInputTokens),
		slog.Duration("duration", r.Duration),
	)
	if p.held {
		buf = append(buf, slog.String("reserved", p.reserved.String()))
		if p.estimated {
			buf = append(buf, slog.Bool("estimated", true))
		}
		if p.cut != "" {
			buf = append(buf, slog.String("cut", p.cut))
		}
	}
	if p.err != "" {
		buf = append(buf, slog.String("err", p.err))
	}
	return buf
}

// recorder writes usage records in the background. Its writer goroutine
// runs only while there is something to write: add starts one when none
// runs, and it exits when the queue is empty. So an idle gateway holds no
// goroutine, and one that is never closed leaks none.
type recorder struct {
	store Store
	log   *slog.Logger
	// Set by newRecorder to the constants above; tests change them before
	// the gateway serves.
	batch    int           // the most records per write
	limit    int           // the most records queued
	retryFor time.Duration // how long a failing write is retried
	linger   time.Duration // how long the writer waits for a batch to fill

	bg   context.Context // the writer's; close cancels it, which ends its retries
	stop context.CancelFunc

	mu      sync.Mutex
	queue   []pending     // guarded by mu; handed in, not yet taken by the writer
	running bool          // guarded by mu; a writer goroutine runs
	closed  bool          // guarded by mu; add writes at once
	waiting int           // guarded by mu; calls waiting for room in the queue
	flushes int           // guarded by mu; flush calls waiting: the writer does not linger
	handed  uint64        // guarded by mu; records ever queued
	done    uint64        // guarded by mu; of those, written or given up, in queue order
	changed chan struct{} // guarded by mu; closed and replaced by signal
}

func newRecorder(st Store, log *slog.Logger) *recorder {
	bg, stop := context.WithCancel(context.Background())
	return &recorder{
		store: st, log: log,
		batch: recordBatch, limit: recordQueue, retryFor: recordRetryFor, linger: recordLinger,
		bg: bg, stop: stop,
		changed: make(chan struct{}),
	}
}

// signal wakes everyone waiting for the recorder's state to change: calls
// waiting for room, Flush, close. r.mu must be held.
func (r *recorder) signal() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// wait releases r.mu until the next signal. r.mu must be held; it is held
// again when wait returns.
func (r *recorder) wait(ctx context.Context) error {
	ch := r.changed
	r.mu.Unlock()
	defer r.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// add hands p to the writer. It waits while the queue is full. After close
// it writes p itself before it returns.
func (r *recorder) add(p pending) {
	r.mu.Lock()
	if !r.closed && len(r.queue) >= r.limit {
		r.waiting++
		r.signal() // whoever watches waiting (a test) sees it change
		for !r.closed && len(r.queue) >= r.limit {
			r.wait(context.Background())
		}
		r.waiting--
	}
	if r.closed {
		r.mu.Unlock()
		r.write(context.Background(), []pending{p})
		return
	}
	r.queue = append(r.queue, p)
	r.handed++
	if !r.running {
		r.running = true
		go r.run()
	}
	r.mu.Unlock()
}

// run writes the queue, a batch at a time, until it is empty (and has
// stayed empty for the linger).
func (r *recorder) run() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		r.lingerLocked()
		if len(r.queue) == 0 {
			break
		}
		n := min(len(r.queue), r.batch)
		b := r.queue[:n:n]
		r.queue = r.queue[n:]
		if len(r.queue) == 0 {
			r.queue = nil
		}
		r.signal() // there is room
		r.mu.Unlock()
		r.write(r.bg, b)
		r.mu.Lock()
		r.done += uint64(n)
		r.signal()
	}
	r.running = false
	r.signal()
}

// lingerLocked waits, up to r.linger, for the queue to fill a batch,
// unless a flush or close waits. r.mu is held.
func (r *recorder) lingerLocked() {
	if r.linger <= 0 {
		return
	}
	t := time.NewTimer(r.linger)
	defer t.Stop()
	for len(r.queue) < r.batch && r.flushes == 0 && !r.closed {
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
			r.mu.Lock()
		case <-t.C:
			r.mu.Lock()
			return
		}
	}
}

// write stores b, retrying with backoff for up to retryFor or until ctx
// ends, and then logs each record's line: the call, or its loss.
func (r *recorder) write(ctx context.Context, b []pending) {
	us := make([]store.UsageRecord, len(b))
	for i, p := range b {
		us[i] = p.rec
	}
	if len(b) > 1 {
		// One attempt for the batch; when it fails, each record on its
		// own, so that one the store refuses neither holds up nor loses
		// the others: the good ones first, then the retries.
		err := r.attempt(ctx, us)
		if err == nil {
			r.logWritten(b)
			return
		}
		r.log.Warn("gateway: usage record batch failed; writing its records one by one", "records", len(b), "first_id", b[0].rec.ID, "err", err.Error())
		var failed []pending
		for i, p := range b {
			err := r.attempt(ctx, us[i:i+1])
			if err != nil {
				failed = append(failed, p)
				continue
			}
			r.logWritten(b[i : i+1])
		}
		for _, p := range failed {
			r.write(ctx, []pending{p})
		}
		return
	}
	bo := backoff.New(recordBackoff)
	deadline := time.Now().Add(r.retryFor)
	for {
		err := r.attempt(ctx, us)
		if err == nil {
			r.logWritten(b)
			return
		}
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			for _, p := range b {
				r.log.LogAttrs(p.ctx, slog.LevelError, "gateway: usage record lost", append(p.logLine(nil), slog.String("record_err", err.Error()))...)
			}
			return
		}
		r.log.Warn("gateway: record usage, retrying", "records", len(b), "first_id", b[0].rec.ID, "err", err.Error())
		bo.Wait(ctx) // ctx's end is seen by the next round
	}
}

// attempt makes one attempt at writing us, bounded to recordTimeout.
func (r *recorder) attempt(ctx context.Context, us []store.UsageRecord) error {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	return r.store.RecordUsages(ctx, us)
}

// logWritten writes the log line of each call whose record is written.
func (r *recorder) logWritten(b []pending) {
	if len(b) == 0 || !r.log.Enabled(b[0].ctx, slog.LevelInfo) {
		return
	}
	var buf [20]slog.Attr
	for i := range b {
		p := &b[i]
		r.log.LogAttrs(p.ctx, slog.LevelInfo, "gateway: call", p.logLine(buf[:0])...)
	}
}

// flush waits until every record queued before it was called is written or
// given up, or ctx ends.
func (r *recorder) flush(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushes++
	r.signal() // a writer lingering writes now
	defer func() { r.flushes-- }()
	target := r.handed
	for r.done < target {
		if err := r.wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// close makes add write at once from now on, and waits until the queue is
// written or ctx ends. When ctx ends first the writer stops retrying: what
// it has not written then is logged as lost. close returns when the writer
// goroutine has exited.
func (r *recorder) close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	r.signal() // calls waiting for room write at once now
	r.mu.Unlock()
	err := r.flush(ctx)
	// Nothing is queued any more, or ctx ended: then the writer's retries
	// end, and what it has not written it logs as lost.
	r.stop()
	r.mu.Lock()
	for r.running {
		r.wait(context.Background())
	}
	r.mu.Unlock()
	return err
}
