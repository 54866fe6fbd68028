package budget

import "time"

// Refusals on the headers: a call whose user, tenant or env has nothing
// left under a limit is refused again, until the limit's window frees
// room, by every later call, whatever its body says. The gateway asks
// Refused before it reads a body (of up to 32 MiB), so that a client
// retrying a spent limit costs neither the memory nor the read.
//
// A denial is remembered only when it holds for any call: not one that
// calls in flight cause (a concurrency limit, held money that may come
// back), not one that this call alone exceeds, not the rolling five
// hours (a smaller call may fit sooner than this one), and only when what
// is settled is at the limit already. It is remembered until the window
// frees room, and no longer than the limits it was judged by are used
// without a read (half the limit cache's time, when they are read again
// ahead); a limit changed through this Service forgets it at once.

// refusal is a remembered denial.
type refusal struct {
	d     Denial
	until time.Time
	gen   uint64 // s.limitGen when it was remembered
}

// refusalKey is whose calls a refusal refuses, and whether free calls
// too (requests-per-minute limits count them).
type refusalKey struct {
	key  sliceKey
	free bool
}

// maxRefusals bounds the remembered refusals; beyond it none is added.
const maxRefusals = 16384

// remember notes d, a denial of c's call by limits read at readAt, when
// it holds for any call of c's subjects until its window frees room.
func (s *Service) remember(c Call, d *Denial, readAt time.Time) {
	l := d.Limit
	if d.InFlight || d.MidStream || l.Kind == Concurrent || l.Kind == SpendPer5h || d.Resets.IsZero() || d.Used < l.Max {
		return
	}
	until := d.Resets
	if ttl := s.o.LimitCacheTTL; ttl > 0 {
		until = minTime(until, readAt.Add(ttl/2))
	}
	k := refusalKey{key: sliceKey{c.User, c.Tenant, c.Env}, free: l.Kind == RequestsPerMinute}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.refusals[k]; !ok && len(s.refusals) >= maxRefusals {
		return
	}
	s.refusals[k] = refusal{d: *d, until: until, gen: s.limitGen}
}

// Refused returns the denial that refuses c's call whatever its body, if
// one is remembered: a free call (count_tokens) only by a
// requests-per-minute limit. It touches no store; nil means nothing is
// known, not that Reserve will admit the call.
func (s *Service) Refused(c Call, free bool) *Denial {
	now := s.now()
	key := sliceKey{c.User, c.Tenant, c.Env}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.refusals) == 0 {
		return nil
	}
	for _, k := range []refusalKey{{key, true}, {key, false}} {
		if free && !k.free {
			continue
		}
		r, ok := s.refusals[k]
		if !ok {
			continue
		}
		if !now.Before(r.until) || r.gen != s.limitGen {
			delete(s.refusals, k)
			continue
		}
		d := r.d
		d.RetryAfter = max(d.Resets.Sub(now), minRetry)
		return &d
	}
	return nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
