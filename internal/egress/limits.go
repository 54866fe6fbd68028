package egress

import (
	"errors"
	"sync"
	"time"
)

var (
	// errConversationLimit: the conversation has MaxTunnelsPerConversation open.
	errConversationLimit = errors.New("the conversation has as many connections open as it may")
	// errTotalLimit: the proxy has MaxTunnels open.
	errTotalLimit = errors.New("the egress proxy has as many connections open as it may")
)

// slots counts the connections open through the proxy, in all and per
// conversation, and refuses one over either limit.
type slots struct {
	perConversation, total int // the limits

	mu     sync.Mutex
	open   int            // guarded by mu
	byConv map[string]int // guarded by mu; no entry for a conversation with none open
}

func newSlots(perConversation, total int) *slots {
	return &slots{perConversation: perConversation, total: total, byConv: map[string]int{}}
}

// acquire takes a slot for conv, or says which limit is reached. The
// release function must be called exactly once.
func (s *slots) acquire(conv string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byConv[conv] >= s.perConversation {
		return nil, errConversationLimit
	}
	if s.open >= s.total {
		return nil, errTotalLimit
	}
	s.open++
	s.byConv[conv]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.open--
			if s.byConv[conv]--; s.byConv[conv] == 0 {
				delete(s.byConv, conv)
			}
		})
	}, nil
}

// logLimiter lets through at most burst lines per key (a conversation, or ""
// for requests that name none) in each interval, so that a process retrying
// a refused destination in a loop cannot flood the worker's log. The first
// line of a new interval reports how many the previous one suppressed.
type logLimiter struct {
	now      func() time.Time
	interval time.Duration
	burst    int

	mu      sync.Mutex
	windows map[string]*logWindow // guarded by mu
}

type logWindow struct {
	start      time.Time
	n          int // lines let through since start
	suppressed int // lines held back since start
}

// maxLogKeys bounds the limiter's memory; past it, windows that have ended
// are dropped (their suppressed counts with them, which only costs a
// number in a log line).
const maxLogKeys = 4096

func newLogLimiter(now func() time.Time, interval time.Duration, burst int) *logLimiter {
	return &logLimiter{now: now, interval: interval, burst: burst, windows: map[string]*logWindow{}}
}

// allow reports whether a line for key may be logged now and, if it may,
// how many lines for key were suppressed before it.
func (l *logLimiter) allow(key string) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	w := l.windows[key]
	if w == nil || now.Sub(w.start) >= l.interval || now.Before(w.start) {
		if w != nil {
			suppressed = w.suppressed
		} else if len(l.windows) >= maxLogKeys {
			l.prune(now)
		}
		l.windows[key] = &logWindow{start: now, n: 1}
		return true, suppressed
	}
	if w.n < l.burst {
		w.n++
		return true, 0
	}
	w.suppressed++
	return false, 0
}

// prune drops the windows that have ended. l.mu must be held.
func (l *logLimiter) prune(now time.Time) {
	for k, w := range l.windows {
		if now.Sub(w.start) >= l.interval {
			delete(l.windows, k)
		}
	}
}
