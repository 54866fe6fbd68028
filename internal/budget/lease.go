package budget

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// Slices: admitting each call with a reservation of its own
// puts a database transaction on every call's way (0.14 ms on SQLite, four
// round trips on PostgreSQL). Instead, for the calls of one user, tenant
// and env, this process reserves a slice of what their limits leave — one
// reservation in the store, like any other, admitted under the same lock
// and the same limits — and admits the calls against the slice in memory.
// The store then holds, for each subject, the settled spend plus every
// replica's slices, which the admissions of slices keep within the limits,
// so no interleaving of replicas can overspend: a call admitted from a
// slice is money the store already holds.
//
// A slice's settlements are written in batches; the transaction that
// writes them moves their cost from the slice to the buckets (the slice's
// reservation shrinks by what they cost, never below what its other
// calls in flight hold), so that the store never counts a settled call
// twice. Every write sets the reservation's absolute size; one that fails
// or whose outcome is unknown leaves the smaller size in memory. A slice
// grows when a call does not fit (on that
// call's way, once for all the calls waiting), and ahead of need when it
// runs low (in the background). It is sized for about Options.LeaseCalls
// calls, or for what its calls in flight hold when that is more, but never
// more than a quarter of what the limits leave: near a limit, slices are
// small and leave room to the other replicas. A slice unused for
// Options.LeaseIdle (a quarter of a second when the limits were nearly
// spent) is trimmed to what its calls still hold, and dropped when that is
// nothing. When this process dies, its slices expire like any reservation.
//
// Only spending and token limits are shared this way, and only soft ones:
// a call under a hard limit, a concurrency limit or a requests-per-minute
// limit has a reservation of its own, because those count or follow each
// call.

// Defaults of Options for slices.
const (
	DefaultLeaseCalls = 8
	DefaultLeaseIdle  = 30 * time.Second
	// scarceIdle is how long a slice is kept unused when, the last time it
	// grew, the limits had little left: others may need what it holds.
	scarceIdle = 250 * time.Millisecond
	// maxBatch bounds the settlements written in one transaction.
	maxBatch = 256
	// growTimeout bounds a growth in the background.
	growTimeout = 10 * time.Second
)

// sliceable reports whether calls under limits can be admitted from a
// slice.
func sliceable(limits []Limit) bool {
	for _, l := range limits {
		if l.Hard || l.Kind == Concurrent || l.Kind == RequestsPerMinute {
			return false
		}
	}
	return true
}

// amount is money and tokens together: a slice holds both, because token
// limits and spending limits may apply at once.
type amount struct {
	cost   Money
	tokens int64
}

func (a amount) plus(b amount) amount  { return amount{a.cost + b.cost, a.tokens + b.tokens} }
func (a amount) minus(b amount) amount { return amount{a.cost - b.cost, a.tokens - b.tokens} }
func (a amount) covers(b amount) bool  { return a.cost >= b.cost && a.tokens >= b.tokens }
func (a amount) times(n int64) amount  { return amount{a.cost * Money(n), a.tokens * n} }
func (a amount) floor() amount         { return amount{max(a.cost, 0), max(a.tokens, 0)} }
func (a amount) zero() bool            { return a.cost == 0 && a.tokens == 0 }

// sliceKey is the set of subjects whose limits a slice is reserved under.
type sliceKey struct{ user, tenant, env string }

// slice is this process's slice of one user's (tenant's, env's) limits.
type slice struct {
	id     string
	key    sliceKey
	limits []Limit   // the limits it was reserved under
	readAt time.Time // when those limits were read from the store

	// write serialises the store writes of this slice (growing, settling,
	// trimming): each writes the reservation's absolute size, computed
	// from granted, which only they change.
	write sync.Mutex

	mu        sync.Mutex
	granted   amount        // guarded by mu; what the reservation holds, as of the last write
	stale     bool          // guarded by mu; a write failed: the reservation may hold more than granted
	inFlight  amount        // guarded by mu; the estimates of the calls admitted and not settled
	calls     int           // guarded by mu; those calls
	waiting   amount        // guarded by mu; what the calls waiting for a growth need
	lastNeed  amount        // guarded by mu; the estimate of the last call admitted
	unwritten amount        // guarded by mu; the costs of settled calls not in the ledger yet
	expires   time.Time     // guarded by mu; the reservation's expiry
	used      time.Time     // guarded by mu; the last admission or growth
	scarce    bool          // guarded by mu; the limits had less left than the last growth wanted
	lastExtra amount        // guarded by mu; the slack the last growth got
	retired   bool          // guarded by mu; admits nothing more
	growing   chan struct{} // guarded by mu; closed when the growth under way ends
	growGen   uint64        // guarded by mu; counts growths
	// The refusal of the last growth a call asked for, with that growth's
	// number and the call's need: the calls that waited for it and need
	// as much are refused with it, instead of each asking the store again.
	denial     *Denial // guarded by mu
	denialGen  uint64  // guarded by mu
	denialNeed amount  // guarded by mu

	queue settleQueue // the settlements to write
}

// room is what the slice can still admit. Called with mu held.
func (l *slice) room() amount { return l.granted.minus(l.inFlight).minus(l.unwritten) }

// usable reports whether the reservation is far enough from its expiry
// to admit from. Called with mu held.
func (l *slice) usable(now time.Time, ttl time.Duration) bool {
	return l.expires.Sub(now) > ttl/3
}

// admit counts a call needing need as in flight. Called with mu held.
// Idleness is measured on the process's clock, not Options.Now: it is
// about this process's activity, and tests fix Options.Now.
func (l *slice) admit(need amount) {
	l.inFlight = l.inFlight.plus(need)
	l.calls++
	l.lastNeed = need
	l.used = time.Now()
}

func newReplicaID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("budget: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// sliceFor returns the current slice of key, reserved under limits (read
// at readAt), making a new one and retiring the old when there is none or
// the limits changed. Limits read before those of the current slice do
// not replace it: that call is admitted under the newer ones.
func (s *Service) sliceFor(key sliceKey, limits []Limit, readAt time.Time) *slice {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.slices[key]; l != nil {
		l.mu.Lock()
		ok := !l.retired && (sameLimits(l.limits, limits) || readAt.Before(l.readAt))
		if !ok {
			l.retired = true
		}
		l.mu.Unlock()
		if ok {
			return l
		}
	}
	s.sliceSeq++
	l := &slice{id: fmt.Sprintf("slice-%s-%d", s.replica, s.sliceSeq), key: key, limits: limits, readAt: readAt}
	l.queue.slice = l
	s.slices[key] = l
	s.sliceByID[l.id] = l
	return l
}

// retireSlices retires the current slices whose subjects include one for
// which match is true. Called with s.mu held.
func (s *Service) retireSlices(match func(sliceKey) bool) {
	for key := range s.slices {
		if match(key) {
			s.retireLocked(key)
		}
	}
}

// retireSlice retires the current slice of key, if there is one.
func (s *Service) retireSlice(key sliceKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retireLocked(key)
}

// retireLocked retires the current slice of key, if any: it admits nothing
// more, and is trimmed and dropped when its calls are done. Called with
// s.mu held.
func (s *Service) retireLocked(key sliceKey) {
	if l := s.slices[key]; l != nil {
		l.mu.Lock()
		l.retired = true
		l.mu.Unlock()
		delete(s.slices, key)
	}
}

// covers reports whether key's subjects include sub.
func (key sliceKey) covers(sub Subject) bool {
	switch sub.Scope {
	case ScopeUser:
		return key.user == sub.ID
	case ScopeTenant:
		return key.tenant == sub.ID
	}
	return Env(key.tenant, key.env) == sub
}

// sameLimits compares two sets of limits, in any order (the cache and the
// store order them differently). Limits of one subject and kind are
// unique, and a call has a handful.
func sameLimits(a, b []Limit) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// reserveFromSlice admits h's call from the slice of its subjects; limits
// were read at readAt.
func (s *Service) reserveFromSlice(ctx context.Context, h *Hold, limits []Limit, readAt time.Time) (*Hold, error) {
	c := h.call
	key := sliceKey{c.User, c.Tenant, c.Env}
	need := amount{h.est.Cost, h.est.Tokens()}
	admitted := func(l *slice) (*Hold, error) {
		h.slice, h.reserved, h.tokens = l, need.cost, need.tokens
		return h, nil
	}
	for {
		l := s.sliceFor(key, limits, readAt)
		now := s.now()
		l.mu.Lock()
		switch {
		case l.retired:
			l.mu.Unlock()
			continue
		case l.room().covers(need) && l.usable(now, s.o.ReservationTTL):
			l.admit(need)
			// Grow ahead of need when what is left would not admit half
			// a slice's calls more than are in flight: the growth then
			// has several calls' time to finish before one waits for it.
			// Not when the last growth found the limits nearly spent:
			// another would add next to nothing.
			low := !l.room().covers(need.times(int64(max(s.o.LeaseCalls/2, 1))).plus(l.inFlight))
			spent := l.scarce && !l.lastExtra.covers(need)
			refill := low && !spent && l.growing == nil
			if refill {
				l.growing = make(chan struct{})
				l.growGen++
				s.growers.Add(1)
			}
			l.mu.Unlock()
			if refill {
				go s.growInBackground(l)
			}
			return admitted(l)
		case l.growing != nil:
			ch, gen := l.growing, l.growGen
			l.waiting = l.waiting.plus(need)
			l.mu.Unlock()
			var err error
			select {
			case <-ch:
			case <-ctx.Done():
				err = fmt.Errorf("budget: reserve %s: %w", c.ID, ctx.Err())
			}
			l.mu.Lock()
			l.waiting = l.waiting.minus(need)
			var d *Denial
			if err == nil && l.denial != nil && l.denialGen == gen && need.covers(l.denialNeed) && !l.room().covers(need) {
				copied := *l.denial
				d = &copied
			}
			l.mu.Unlock()
			if err != nil {
				return nil, err
			}
			if d != nil {
				return nil, d
			}
			continue
		}
		ch := make(chan struct{})
		l.growing = ch
		l.growGen++
		gen := l.growGen
		l.mu.Unlock()
		ok, err := s.grow(ctx, l, need, true)
		d, denied := errors.AsType[*Denial](err)
		l.mu.Lock()
		l.growing = nil
		close(ch)
		if denied {
			l.denial, l.denialGen, l.denialNeed = d, gen, need
		}
		l.mu.Unlock()
		switch {
		case denied:
			return nil, err
		case err != nil:
			return nil, fmt.Errorf("budget: reserve %s: %w", c.ID, err)
		case ok:
			return admitted(l)
		}
	}
}

// growInBackground grows l ahead of need; l.growing is set and counted in
// s.growers. A refusal only means the limits leave no more room for
// slack.
func (s *Service) growInBackground(l *slice) {
	defer s.growers.Done()
	ctx, cancel := context.WithTimeout(s.bg, growTimeout)
	_, err := s.grow(ctx, l, amount{}, false)
	cancel()
	if _, denied := errors.AsType[*Denial](err); err != nil && !denied && s.bg.Err() == nil {
		s.log.Warn("budget: grow slice", "slice", l.id, "user", l.key.user, "tenant", l.key.tenant, "env", l.key.env, "err", err.Error())
	}
	l.mu.Lock()
	close(l.growing)
	l.growing = nil
	l.mu.Unlock()
}

// grow enlarges l's reservation so that it can admit need more, plus slack
// (see the top of this file), and when admit is true admits a call needing
// need from it at once, so that no other call takes the room first;
// admitted says whether it did. A *Denial is the refusal of a call needing
// need, in that call's terms. A retired slice does not grow.
func (s *Service) grow(ctx context.Context, l *slice, need amount, admit bool) (admitted bool, err error) {
	l.write.Lock()
	defer l.write.Unlock()
	l.mu.Lock()
	if l.retired {
		l.mu.Unlock()
		return false, nil
	}
	granted, exposure, waiting := l.granted, l.inFlight.plus(l.unwritten), l.waiting
	short := need.minus(l.room()).floor()
	perCall := need
	if perCall.zero() {
		perCall = l.lastNeed
	}
	l.mu.Unlock()
	// The slack: room for LeaseCalls more calls, or as much as is in
	// flight, and for the calls that arrived while the slice was growing,
	// so that a burst of calls costs a growth or two, not one per doubling.
	n := int64(s.o.LeaseCalls)
	want := amount{max(perCall.cost*Money(n), exposure.cost), max(perCall.tokens*n, exposure.tokens)}.plus(waiting)

	now := s.now()
	subjects := []Subject{User(l.key.user), Tenant(l.key.tenant), Env(l.key.tenant, l.key.env)}
	r := Reservation{
		ID: l.id, User: l.key.user, Tenant: l.key.tenant, Env: l.key.env,
		Cost: granted.cost + short.cost, Tokens: granted.tokens + short.tokens,
		CreatedAt: now, ExpiresAt: now.Add(s.o.ReservationTTL), Slice: true,
	}
	var (
		final  Reservation
		extra  amount
		scarce bool
	)
	err = s.store.ReserveBudget(ctx, r, snapshotQuery(l.limits, subjects, now), func(snap *Snapshot, r *Reservation) error {
		if err := evaluateCall(l.limits, snap, *r, need, now, s.o.InFlightRetry); err != nil {
			return err
		}
		free := headroom(l.limits, snap, *r, now)
		extra = amount{min(want.cost, free.cost/4), min(want.tokens, free.tokens/4)}.floor()
		scarce = extra.cost < want.cost || extra.tokens < want.tokens
		r.Cost += extra.cost
		r.Tokens += extra.tokens
		final = *r
		return nil
	})
	if err != nil {
		return false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.granted = amount{final.Cost, final.Tokens}
	l.stale = false
	l.expires = final.ExpiresAt
	l.scarce, l.lastExtra = scarce, extra
	l.used = time.Now() // not idle before its first call
	if admit && !l.retired && l.room().covers(need) {
		l.admit(need)
		return true, nil
	}
	return false, nil
}

// evaluateCall decides the growth of a slice by r for a call needing need:
// nil, or the call's *Denial, with the slice's calls in flight counted as
// held and the call's own need as the need.
func evaluateCall(limits []Limit, snap *Snapshot, r Reservation, need amount, now time.Time, inFlightRetry time.Duration) error {
	var worst *Denial
	for _, lim := range limits {
		d := check(lim, snap, r, now, inFlightRetry)
		if d == nil {
			continue
		}
		n := int64(need.cost)
		if lim.Kind == TokensPerDay {
			n = need.tokens
		}
		d.Held += d.Need - n
		d.Need = n
		d.classify(snap, now, inFlightRetry)
		if worst == nil || d.RetryAfter > worst.RetryAfter {
			worst = d
		}
	}
	if worst != nil {
		return worst
	}
	return nil
}

// headroom is what limits leave beyond r, in money and in tokens; a
// dimension no limit bounds is unbounded.
func headroom(limits []Limit, snap *Snapshot, r Reservation, now time.Time) amount {
	free := amount{Money(1<<62 - 1), 1<<62 - 1}
	for _, lim := range limits {
		used, held, need := standing(lim, snap, r, now)
		left := lim.Max - used - held - need
		if lim.Kind == TokensPerDay {
			free.tokens = min(free.tokens, left)
		} else {
			free.cost = min(free.cost, Money(left))
		}
	}
	return free
}

// settled takes a call admitted from l off its calls in flight and counts
// its cost as unwritten until its ledger entry is.
func (l *slice) settled(need amount, e Entry) {
	l.mu.Lock()
	l.inFlight = l.inFlight.minus(need)
	l.calls--
	l.unwritten = l.unwritten.plus(amount{e.Cost, e.Usage.Tokens()})
	l.mu.Unlock()
}

// settledSize is the size l's reservation gets when settlements costing
// sum are written: their money moves to the ledger, but never below what
// the calls still in flight and the other unwritten settlements need
// (a call that cost more than its estimate takes no cover from the others,
// as with reservations of their own), and never above what it holds.
// Called with l.write held.
func (l *slice) settledSize(sum amount) amount {
	l.mu.Lock()
	defer l.mu.Unlock()
	still := l.inFlight.plus(l.unwritten).minus(sum)
	next := l.granted.minus(sum)
	next = amount{max(next.cost, still.cost), max(next.tokens, still.tokens)}
	return amount{min(next.cost, l.granted.cost), min(next.tokens, l.granted.tokens)}.floor()
}

// trim gives back what l holds beyond its calls' needs when it has been
// unused long enough (or is retired, or all is true), and drops it when
// nothing is left. It reports whether l is gone.
func (s *Service) trim(ctx context.Context, l *slice, all bool) bool {
	if all {
		l.write.Lock()
	} else if !l.write.TryLock() {
		return false // being written: in use
	}
	defer l.write.Unlock()
	l.mu.Lock()
	idle := s.o.LeaseIdle
	if l.scarce {
		idle = min(idle, scarceIdle)
	}
	if !all && !l.retired && time.Since(l.used) < idle {
		l.mu.Unlock()
		return false
	}
	exposure := l.inFlight.plus(l.unwritten).floor()
	gone := l.calls == 0 && exposure.zero() && l.growing == nil && l.queue.empty()
	if gone {
		l.retired = true
	}
	target := amount{min(l.granted.cost, exposure.cost), min(l.granted.tokens, exposure.tokens)}
	write := target != l.granted || l.stale
	// Locally first, and kept even if the write fails (it may have been
	// committed): nothing is admitted from what is about to go.
	l.granted = target
	l.mu.Unlock()
	if write {
		_, err := s.store.SettleBudgetBatch(ctx, nil, &SliceSize{ID: l.id, Cost: target.cost, Tokens: target.tokens})
		l.mu.Lock()
		l.stale = err != nil // the next trim writes it again
		l.mu.Unlock()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("budget: trim slice", "slice", l.id, "user", l.key.user, "tenant", l.key.tenant, "env", l.key.env, "err", err.Error())
			}
			return false
		}
	}
	if gone {
		s.mu.Lock()
		if s.slices[l.key] == l {
			delete(s.slices, l.key)
		}
		delete(s.sliceByID, l.id)
		s.mu.Unlock()
	}
	return gone
}

// trimSlices trims every slice (see trim).
func (s *Service) trimSlices(ctx context.Context, all bool) {
	s.mu.Lock()
	ls := slices.Collect(maps.Values(s.sliceByID))
	s.mu.Unlock()
	for _, l := range ls {
		s.trim(ctx, l, all)
	}
}

// Release gives back now what this process's slices hold beyond their
// calls in flight, as if they had been idle (Close does it too). Other
// replicas can then use it at once.
func (s *Service) Release(ctx context.Context) {
	s.trimSlices(ctx, true)
}
