package auth

import (
	"math"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

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
func (ls *limiters) allow(key string, now time.Time) (ok bool, retry string) {
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
