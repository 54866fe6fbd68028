package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Checkpoints. In WAL mode a commit appends pages to the -wal file; a
// checkpoint copies them back into the database file and syncs it, and once
// everything is copied the next writer starts the WAL over from its
// beginning. SQLite's automatic checkpoint runs inside the commit that takes
// the WAL past 1,000 pages, on the committing connection: 3–4 ms of copying
// and syncing inline in whichever write crossed the line (a gateway
// reservation, a usage record, a settlement), which was the p99 of a model
// call through the gateway (bench/gateway). So every connection runs
// with wal_autocheckpoint=0 and a checkpointer does that work in the
// background, on a connection of its own that no request waits for.
//
// A PASSIVE checkpoint takes no lock that a writer or a reader waits for: it
// copies what it can and stops at the oldest snapshot a reader still uses.
// But the WAL restarts only when a write begins with everything copied, and
// writes that land while a checkpoint copies leave it behind again; so under
// steady writes, or with a reader that keeps an old snapshot, the WAL grows.
// A pass therefore repeats PASSIVE while writes land during it (a few times
// at most), and once the WAL holds more than walLimit since its last restart
// it forces a RESTART checkpoint: that one holds new writers back while it
// copies the rest (little, right after a PASSIVE), waits up to
// forcedTimeout for readers of old snapshots, and lets the next write start
// the WAL over. That stall is the price of a bounded WAL, paid only after
// the cheap way failed, once per walLimit of writes at most; a failed
// attempt backs off, so that a reader that never ends (a leaked *sql.Rows)
// does not stall writers over and over.
//
// RESTART, not TRUNCATE: emptying the file is more work under the writer
// lock (under a flood of 30,000 commits a second, stalls of up to 80 ms
// against 10–40 ms), and SQLite reuses the file from its beginning anyway.
// Close truncates it.
const (
	// checkpointInterval is how often the checkpointer runs. A pass with
	// nothing to copy costs a few microseconds and no sync; one after a busy
	// interval copies that interval's pages.
	checkpointInterval = 200 * time.Millisecond

	// catchUps is how many more PASSIVE checkpoints a pass runs while
	// writes land during the previous one: each has less to copy, so is
	// more likely to finish with nothing new written, which lets the next
	// write restart the WAL.
	catchUps = 2

	// walLimit is how much WAL (bytes of frames since its last restart)
	// forces a RESTART checkpoint. The -wal file keeps its largest size
	// until Close; this bounds it to about walLimit plus what is written
	// during one pass.
	walLimit = 64 << 20

	// forcedTimeout is how long a forced checkpoint waits for the writer
	// and for readers, in milliseconds: the checkpointer connection's
	// busy_timeout. While it waits for readers it holds the writer lock.
	forcedTimeout = 1000

	// maxForcedBackoff bounds the wait after failed forced checkpoints,
	// which doubles from a second.
	maxForcedBackoff = time.Minute
)

// checkpointer copies the WAL back into the database file in the background.
// run's goroutine is its only user until close.
type checkpointer struct {
	db        *sql.DB // one connection, wal_autocheckpoint=0, busy_timeout=forcedTimeout
	frameSize int64   // bytes of a WAL frame: a page and its header
	limit     int64   // walLimit; tests lower it
	log       *slog.Logger

	cancel context.CancelFunc // ends run
	done   chan struct{}      // closed when run has returned

	// Owned by the goroutine calling pass.
	retryAt time.Time     // no forced checkpoint before this
	backoff time.Duration // the current wait after a failed forced checkpoint
	failing bool          // the last checkpoint failed (and was logged)

	mu     sync.Mutex       // guards last and passed
	last   checkpointResult // of the last pass
	passed chan struct{}    // closed, and replaced, when a pass ends
}

// checkpointResult is what a pass did: the row of its last PRAGMA
// wal_checkpoint, or the error that kept it from running.
type checkpointResult struct {
	mode         string // PASSIVE, or RESTART when the pass forced one
	busy         bool   // the checkpoint could not finish: readers, the writer or another checkpoint in the way
	log          int    // frames in the WAL
	checkpointed int    // frames of them now in the database file
	err          error
}

// newCheckpointer opens the checkpointer's connection to the file database
// at path. It does not start it.
func newCheckpointer(ctx context.Context, path string, log *slog.Logger) (*checkpointer, error) {
	// A connection of its own rather than one pinned from the reader pool
	// (whose query_only would allow checkpoints): readers keep their four
	// connections, and the forced checkpoint's wait is this connection's
	// busy_timeout without changing the others'. synchronous=NORMAL, from
	// openDB, matters here: it is the checkpointing connection's setting
	// that syncs the database file before the WAL is reused.
	db, err := openDB(ctx, path, 1, map[string]string{"_busy_timeout": fmt.Sprint(forcedTimeout)})
	if err != nil {
		return nil, err
	}
	var pageSize int64
	if err := db.QueryRowContext(ctx, "PRAGMA page_size").Scan(&pageSize); err != nil {
		db.Close()
		return nil, err
	}
	return &checkpointer{
		db:        db,
		frameSize: pageSize + 24,
		limit:     walLimit,
		log:       log,
		done:      make(chan struct{}),
		passed:    make(chan struct{}),
	}, nil
}

// start runs the checkpointer every interval until stop.
func (c *checkpointer) start(interval time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go c.run(ctx, interval)
}

func (c *checkpointer) run(ctx context.Context, interval time.Duration) {
	defer close(c.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			r := c.pass(ctx, now)
			c.mu.Lock()
			c.last = r
			close(c.passed)
			c.passed = make(chan struct{})
			c.mu.Unlock()
		}
	}
}

// pass runs PASSIVE checkpoints, and a RESTART one when the WAL has grown
// past the limit and no backoff holds it off. now is the time of the pass,
// for the backoff.
func (c *checkpointer) pass(ctx context.Context, now time.Time) checkpointResult {
	r := c.checkpoint(ctx, "PASSIVE")
	for i := 0; i < catchUps && r.err == nil; i++ {
		prev := r
		r = c.checkpoint(ctx, "PASSIVE")
		if r.log == prev.log && r.checkpointed == prev.checkpointed {
			break // nothing written meanwhile: the next write restarts the WAL, unless a reader holds it
		}
	}
	if r.err != nil || int64(r.log)*c.frameSize <= c.limit || now.Before(c.retryAt) {
		return r
	}
	frames := r.log
	r = c.checkpoint(ctx, "RESTART")
	switch {
	case ctx.Err() != nil:
	case r.err == nil && !r.busy:
		c.backoff, c.retryAt = 0, time.Time{}
		c.log.Info("sqlite: WAL over its limit, restarted", "wal_bytes", int64(frames)*c.frameSize, "limit_bytes", c.limit)
	default:
		c.backoff = min(max(2*c.backoff, time.Second), maxForcedBackoff)
		c.retryAt = now.Add(c.backoff)
		if r.err == nil { // checkpoint logged the error
			c.log.Warn("sqlite: WAL over its limit and a restarting checkpoint was blocked (a long read, or another process's checkpoint)",
				"wal_bytes", int64(r.log)*c.frameSize, "limit_bytes", c.limit, "frames", r.log, "checkpointed", r.checkpointed, "retry_in", c.backoff)
		}
	}
	return r
}

// checkpoint runs PRAGMA wal_checkpoint(mode). Its failures are logged when
// they start and when they end, not at every pass: the store keeps working
// without checkpoints, only its WAL grows.
func (c *checkpointer) checkpoint(ctx context.Context, mode string) checkpointResult {
	r := checkpointResult{mode: mode}
	var busy int
	r.err = c.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &r.log, &r.checkpointed)
	r.busy = busy != 0
	switch {
	case r.err != nil && ctx.Err() != nil:
		// Stopping; not a failure.
	case r.err != nil && !c.failing:
		c.failing = true
		c.log.Error("sqlite: checkpoint failed; the WAL grows until one succeeds", "mode", mode, "err", r.err)
	case r.err == nil && c.failing:
		c.failing = false
		c.log.Info("sqlite: checkpoint works again", "mode", mode)
	}
	return r
}

// stop ends the goroutine and waits for it.
func (c *checkpointer) stop() {
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
}

// close runs a last TRUNCATE checkpoint, so that a closed store leaves an
// empty WAL even while another process keeps the database open, and closes
// the connection. The caller has called stop and closed its other
// connections, which could otherwise be in the way. A checkpoint that fails
// is logged, not returned: nothing is lost, the next checkpoint of whoever
// opens the database does the work.
func (c *checkpointer) close() error {
	r := c.checkpoint(context.Background(), "TRUNCATE")
	if r.err == nil && r.busy {
		c.log.Debug("sqlite: final checkpoint blocked by another process", "frames", r.log, "checkpointed", r.checkpointed)
	}
	return c.db.Close()
}
