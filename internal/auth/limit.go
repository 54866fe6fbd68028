package auth

import (
	"context"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/talkide/platform/internal/store"
)

// A limiter lets an event for a key (a source address, an API token's id)
// happen or not: in this process's memory (limiters), or in counts that
// every replica on the store shares (sharedLimiter).
type limiter interface {
	// allow counts one event for key at now; when it may not happen,
	// retry says in how many whole seconds it could.
	allow(ctx context.Context, key string, now time.Time) (ok bool, retry string)
	// blocked reports whether an event for key would be refused now,
	// without counting one.
	blocked(ctx context.Context, key string, now time.Time) bool
}

// limiters hands out one token bucket per key (a source address, an API
// token's id) and forgets the idle ones, so that a flood of distinct keys
// costs bounded memory.
type limiters struct {
	limit rate.Limit
	burst int
	max   int // keys kept at most; past it the idle are dropped, then all

	mu sync.Mutex // guards m
	m  map[string]*keyLimiter
}

type keyLimiter struct {
	l    *rate.Limiter
	seen time.Time
}

func newLimiters(perMinute float64, burst, max int) *limiters {
	return &limiters{limit: rate.Limit(perMinute / 60), burst: burst, max: max, m: make(map[string]*keyLimiter)}
}

// allow takes one event for key at now; when it may not happen, retry says
// in how many whole seconds it could.
func (ls *limiters) allow(_ context.Context, key string, now time.Time) (ok bool, retry string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	kl := ls.m[key]
	if kl == nil {
		if len(ls.m) >= ls.max {
			ls.sweep(now)
		}
		kl = &keyLimiter{l: rate.NewLimiter(ls.limit, ls.burst)}
		ls.m[key] = kl
	}
	kl.seen = now
	r := kl.l.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, strconv.Itoa(int(math.Ceil(d.Seconds())))
	}
	return true, ""
}

// sweep drops the keys idle long enough to have refilled their bucket, and
// every key when that frees nothing. mu is held.
func (ls *limiters) sweep(now time.Time) {
	full := time.Duration(float64(ls.burst) / float64(ls.limit) * float64(time.Second))
	for k, kl := range ls.m {
		if now.Sub(kl.seen) > full {
			delete(ls.m, k)
		}
	}
	if len(ls.m) >= ls.max {
		clear(ls.m)
	}
}

// blocked reports whether key's bucket is empty, without taking from it.
func (ls *limiters) blocked(_ context.Context, key string, now time.Time) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	kl := ls.m[key]
	return kl != nil && kl.l.TokensAt(now) < 1
}

// rateWindow is the length of a shared limiter's fixed window.
const rateWindow = time.Minute

// sharedLimiter allows limit events per key in each fixed minute (from the
// start of a UTC minute), counted in the store that every replica shares,
// so that spreading requests over the replicas gains a client nothing. A
// fixed window lets a client spend a minute's events at once, and at most
// twice as many across a window's end; the token buckets in memory smooth
// that better, but they would need a write per event and a lock on the
// row of every read.
//
// The store failing does not refuse the request: the call that follows
// (a token lookup, a login) needs the store too and fails on its own, and a
// limit that refused everyone while the database blinked would turn a short
// fault into an outage. It is logged.
type sharedLimiter struct {
	st    store.RateWindows
	name  string // the limit's name in the store: "login", "token", "failure"
	limit int64  // events per window
	log   *slog.Logger
}

func newSharedLimiter(st store.RateWindows, name string, perMinute float64, log *slog.Logger) *sharedLimiter {
	return &sharedLimiter{st: st, name: name, limit: max(int64(perMinute), 1), log: log}
}

func (l *sharedLimiter) allow(ctx context.Context, key string, now time.Time) (bool, string) {
	start := now.Truncate(rateWindow)
	n, err := l.st.HitRate(ctx, l.name, key, start)
	if err != nil {
		l.log.Warn("rate limit: counting failed; letting the request through", "limit", l.name, "err", err)
		return true, ""
	}
	if n <= l.limit {
		return true, ""
	}
	return false, strconv.Itoa(max(int(math.Ceil(start.Add(rateWindow).Sub(now).Seconds())), 1))
}

func (l *sharedLimiter) blocked(ctx context.Context, key string, now time.Time) bool {
	n, err := l.st.RateHits(ctx, l.name, key, now.Truncate(rateWindow))
	if err != nil {
		l.log.Warn("rate limit: reading a count failed; letting the request through", "limit", l.name, "err", err)
		return false
	}
	return n >= l.limit
}
