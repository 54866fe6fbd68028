// Package budget is the UserBudgetService: spending and fair-use limits per
// user, tenant and env, reservations that admit model calls before they go
// upstream, and a ledger that charges each call its exact cost.
//
// The gateway asks Service.Reserve before forwarding a call and settles the
// Hold when the call is done; docs/budgets.md describes the whole design.
package budget

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/inflight"
)

// Defaults of Options.
const (
	DefaultReservationTTL  = 10 * time.Minute
	DefaultLimitCacheTTL   = 5 * time.Second
	DefaultOutputTokens    = 1024
	DefaultInFlightRetry   = 2 * time.Second
	DefaultHardStopMargin  = 64
	DefaultCollectInterval = 10 * time.Minute
	settleAttempt          = 10 * time.Second
	releaseTimeout         = 5 * time.Second
)

// Options configures a Service. The zero value is usable.
type Options struct {
	Logger *slog.Logger     // nil: don't log
	Now    func() time.Time // nil: time.Now

	// ReservationTTL is how long a reservation lives unless renewed. The
	// service renews those of its calls in flight every third of it, so
	// only the reservations of a process that died (or lost its database)
	// expire, and the money they held is free again after at most this
	// long. Default DefaultReservationTTL.
	ReservationTTL time.Duration
	// LimitCacheTTL is how long limits read from the store are used before
	// they are read again; a limit set through another process takes effect
	// here within it. Negative: read them on every call. Default
	// DefaultLimitCacheTTL.
	LimitCacheTTL time.Duration
	// DefaultOutputTokens is the output estimate for a user without history.
	DefaultOutputTokens int64
	// InFlightRetry is the Retry-After of a denial that only calls in
	// flight cause. Default DefaultInFlightRetry.
	InFlightRetry time.Duration
	// HardStopMargin is how many output tokens ahead of the stream a hard
	// limit's reservation is kept: a stream is cut when it could not be
	// extended by that much, so the cut comes before the limit, not after.
	// Default DefaultHardStopMargin.
	HardStopMargin int64
	// CollectInterval is how often expired reservations and old buckets are
	// deleted. Default DefaultCollectInterval.
	CollectInterval time.Duration
	// LeaseCalls sizes the slices of limits this process reserves and
	// admits calls from in memory (lease.go): room for about this many
	// calls, or for what the calls in flight hold if more, never more than
	// a quarter of what the limits leave. Negative: no slices, every call
	// under a limit is a reservation in the store. Default
	// DefaultLeaseCalls.
	LeaseCalls int
	// LeaseIdle is how long a slice is kept unused before what it holds
	// beyond its calls in flight is given back. Default DefaultLeaseIdle.
	LeaseIdle time.Duration
	// Settled, when set, is called once for each ledger entry this process
	// writes, after it is written, and not for a settlement the ledger
	// already held: what it is given has been charged exactly once. It runs
	// on the goroutine that wrote the entry and must not block (metrics).
	Settled func(Entry)
}

// Call is a model call asking for admission.
type Call struct {
	// ID is unique per upstream request: the key of the reservation and of
	// the ledger entry, so a settlement retried never charges twice.
	ID                  string
	Tenant, Env, User   string
	Conversation, Model string // Model as the request names it
	RequestBytes        int64  // size of the request body, an image counted as the tokens it costs (×4)
	MaxTokens           int64  // the request's max_tokens; 0 if unknown
	StartedAt           time.Time
}

// Service admits and charges model calls. It is safe for concurrent use.
// New starts its background work (renewing reservations, collecting
// garbage); Close stops it.
type Service struct {
	store  Store
	prices *Prices
	log    *slog.Logger
	now    func() time.Time
	o      Options

	mu     sync.Mutex
	limits map[Subject]cachedLimits // guarded by mu
	// limitReads are the reads of limits in flight, by the subjects they
	// read (limitcache.go); limitGen counts the limits changed here, so
	// that a read that began before a change does not fill the cache.
	limitReads map[string]*limitRead  // guarded by mu
	limitGen   uint64                 // guarded by mu
	history    map[string]*history    // guarded by mu; by user id
	live       map[string]*Hold       // guarded by mu; tracked holds, renewed until settled
	closed     bool                   // guarded by mu
	unknown    map[string]bool        // guarded by mu; unpriced models already logged
	refusals   map[refusalKey]refusal // guarded by mu; refusal.go

	replica   string              // names this process's slices
	sliceSeq  uint64              // guarded by mu
	slices    map[sliceKey]*slice // guarded by mu; the current slice of each key
	sliceByID map[string]*slice   // guarded by mu; every slice with a reservation, retired ones too
	queue     settleQueue         // settlements of calls not admitted from a slice
	growers   inflight.Count      // slices growing in the background

	settling inflight.Count // settlements in flight; Flush may wait beside new ones
	// flushing counts the Flush calls under way: a slice's writer does
	// not linger (drain) while one waits. kick is closed, and replaced,
	// when one begins, to end a linger under way.
	flushing atomic.Int32
	kick     chan struct{} // guarded by mu
	bg       context.Context
	stopBG   context.CancelFunc
	bgDone   chan struct{}
}

type cachedLimits struct {
	limits []Limit
	at     time.Time
}

// New returns a Service over st that prices calls with prices. It panics
// if either is nil.
func New(st Store, prices *Prices, opts *Options) *Service {
	if st == nil || prices == nil {
		panic("budget: nil store or prices")
	}
	o := defaults.Copy(opts)
	defaults.Logger(&o.Logger)
	defaults.Clock(&o.Now)
	defaults.IfNotPositive(&o.ReservationTTL, DefaultReservationTTL)
	defaults.IfZero(&o.LimitCacheTTL, DefaultLimitCacheTTL)
	defaults.IfNotPositive(&o.DefaultOutputTokens, DefaultOutputTokens)
	defaults.IfNotPositive(&o.InFlightRetry, DefaultInFlightRetry)
	defaults.IfNotPositive(&o.HardStopMargin, DefaultHardStopMargin)
	defaults.IfNotPositive(&o.CollectInterval, DefaultCollectInterval)
	defaults.IfZero(&o.LeaseCalls, DefaultLeaseCalls)
	defaults.IfNotPositive(&o.LeaseIdle, DefaultLeaseIdle)
	s := &Service{
		store: st, prices: prices, log: o.Logger, now: o.Now, o: o,
		limits:     map[Subject]cachedLimits{},
		limitReads: map[string]*limitRead{},
		history:    map[string]*history{},
		live:       map[string]*Hold{},
		unknown:    map[string]bool{},
		replica:    newReplicaID(),
		slices:     map[sliceKey]*slice{},
		sliceByID:  map[string]*slice{},
		bgDone:     make(chan struct{}),
		kick:       make(chan struct{}),
		refusals:   map[refusalKey]refusal{},
	}
	s.bg, s.stopBG = context.WithCancel(context.Background())
	go s.background()
	return s
}

// Prices returns the price list the service charges with.
func (s *Service) Prices() *Prices { return s.prices }

// Reservations returns the number of calls of this process that hold
// money now: admitted against a limit, with a reservation of their own or
// from a slice, and not yet settled. Calls of users without limits hold
// none.
func (s *Service) Reservations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.live)
	for _, l := range s.sliceByID {
		l.mu.Lock()
		n += l.calls
		l.mu.Unlock()
	}
	return n
}

// Reserve admits c or refuses it with a *Denial. An admitted call holds a
// reservation sized from its estimated cost until its Hold is settled.
// Any other error means the budget could not be checked (the store failed);
// the call should not go upstream.
//
// A call none of whose subjects (user, tenant, env) has a limit is admitted
// without touching the store: only its settlement is written.
func (s *Service) Reserve(ctx context.Context, c Call) (*Hold, error) {
	now := s.now()
	if c.StartedAt.IsZero() {
		c.StartedAt = now
	}
	subjects := []Subject{User(c.User), Tenant(c.Tenant), Env(c.Tenant, c.Env)}
	limits, readAt, err := s.cachedLimits(ctx, subjects, now)
	if err != nil {
		return nil, err
	}
	price, _ := s.prices.Lookup(c.Model)
	h := &Hold{s: s, call: c, price: price}
	if len(limits) == 0 {
		return h, nil
	}
	hist := s.historyOf(ctx, c.User)
	h.est = hist.estimate(c, price, s.o.DefaultOutputTokens)
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if s.o.LeaseCalls > 0 && sliceable(limits) && !closed {
		h, err := s.reserveFromSlice(ctx, h, limits, readAt)
		if d, ok := errors.AsType[*Denial](err); ok {
			s.remember(c, d, readAt)
		}
		return h, err
	}
	// A reservation of its own: a slice these subjects had (their limits
	// were all sliceable before) admits nothing more.
	s.retireSlice(sliceKey{c.User, c.Tenant, c.Env})
	for _, l := range limits {
		if l.Hard {
			h.hard = append(h.hard, l)
		}
	}
	r := Reservation{
		ID: c.ID, User: c.User, Tenant: c.Tenant, Env: c.Env,
		Cost: h.est.Cost, Tokens: h.est.Tokens(),
		CreatedAt: now, ExpiresAt: now.Add(s.o.ReservationTTL),
	}
	if err := s.reserve(ctx, "reserve", c, r, limits, subjects, now, readAt); err != nil {
		return nil, err
	}
	h.tracked = true
	h.reserved, h.tokens = r.Cost, r.Tokens
	s.mu.Lock()
	s.live[c.ID] = h
	s.mu.Unlock()
	return h, nil
}

// Admit admits a call that costs nothing (the gateway's count_tokens)
// against the requests-per-minute limits of its user, tenant and env, and
// counts it in them: such a call is free, so no spending, token or
// concurrency limit applies and nothing is settled, but it is a request,
// and a limit of N requests a minute that let any number of them through
// would limit nothing. It returns a *Denial for a call such a limit
// refuses, and any other error when the limits cannot be checked. Without
// such a limit it touches no database.
func (s *Service) Admit(ctx context.Context, c Call) error {
	now := s.now()
	subjects := []Subject{User(c.User), Tenant(c.Tenant), Env(c.Tenant, c.Env)}
	limits, readAt, err := s.cachedLimits(ctx, subjects, now)
	if err != nil {
		return err
	}
	var rpm []Limit
	for _, l := range limits {
		if l.Kind == RequestsPerMinute {
			rpm = append(rpm, l)
		}
	}
	if len(rpm) == 0 {
		return nil
	}
	// A reservation that holds nothing and is live for no instant: the
	// store counts it, being new, in the minute buckets of the subjects,
	// and no admission after it counts it as held (it expires at now).
	// CollectBudget deletes it with the other expired ones.
	r := Reservation{ID: c.ID, User: c.User, Tenant: c.Tenant, Env: c.Env, CreatedAt: now, ExpiresAt: now}
	return s.reserve(ctx, "admit", c, r, rpm, subjects, now, readAt)
}

// reserve stores r for call c if limits, read at readAt, admit it: a
// refusal is a *Denial, remembered for the call's retries; any other error
// says what failed.
func (s *Service) reserve(ctx context.Context, what string, c Call, r Reservation, limits []Limit, subjects []Subject, now, readAt time.Time) error {
	q := snapshotQuery(limits, subjects, now)
	err := s.store.ReserveBudget(ctx, r, q, func(snap *Snapshot, r *Reservation) error {
		return evaluate(limits, snap, *r, now, s.o.InFlightRetry)
	})
	if err != nil {
		if d, ok := errors.AsType[*Denial](err); ok {
			s.remember(c, d, readAt)
			return err
		}
		return fmt.Errorf("budget: %s %s: %w", what, c.ID, err)
	}
	return nil
}

// extend raises h's reservation to cost if the hard limits allow it.
func (s *Service) extend(ctx context.Context, h *Hold, cost Money) error {
	now := s.now()
	h.mu.Lock()
	r := Reservation{
		ID: h.call.ID, User: h.call.User, Tenant: h.call.Tenant, Env: h.call.Env,
		Cost: cost, Tokens: h.tokens, CreatedAt: now, ExpiresAt: now.Add(s.o.ReservationTTL),
	}
	h.mu.Unlock()
	q := snapshotQuery(h.hard, r.Subjects(), now)
	err := s.store.ReserveBudget(ctx, r, q, func(snap *Snapshot, r *Reservation) error {
		return evaluate(h.hard, snap, *r, now, s.o.InFlightRetry)
	})
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.reserved = max(h.reserved, cost)
	h.mu.Unlock()
	return nil
}

// cachedLimits returns the limits of subjects, from the cache when fresh.
// Those of the subjects it lacks are read from the store, in one read that
// concurrent callers lacking the same subjects share (limitcache.go); those
// past half their time in the cache are read again in the background.
//
// readAt is when the oldest of the limits returned was read.
func (s *Service) cachedLimits(ctx context.Context, subjects []Subject, now time.Time) (limits []Limit, readAt time.Time, err error) {
	var (
		out            []Limit
		missing, stale []Subject
	)
	readAt = now
	ttl := s.o.LimitCacheTTL
	s.mu.Lock()
	for _, sub := range subjects {
		c, ok := s.limits[sub]
		age := now.Sub(c.at)
		switch {
		case !ok || ttl <= 0 || age >= ttl:
			missing = append(missing, sub)
			continue
		case age >= ttl/2:
			stale = append(stale, sub)
		}
		out = append(out, c.limits...)
		if c.at.Before(readAt) {
			readAt = c.at
		}
	}
	if len(missing) == 0 {
		if len(stale) > 0 {
			// Read again ahead of expiry, in the background: a busy
			// subject's calls never wait for its limits.
			s.startLimitRead(ctx, stale, now) // unlocks s.mu
		} else {
			s.mu.Unlock()
		}
		return out, readAt, nil
	}
	r := s.startLimitRead(ctx, missing, now) // unlocks s.mu
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, time.Time{}, ctx.Err()
	}
	if r.err != nil {
		return nil, time.Time{}, fmt.Errorf("budget: read limits: %w", r.err)
	}
	return append(out, r.limits...), readAt, nil
}

// historyOf returns the history of user, seeded from the ledger the first
// time this process sees the user.
func (s *Service) historyOf(ctx context.Context, user string) *history {
	s.mu.Lock()
	h, ok := s.history[user]
	if !ok {
		h = &history{}
		s.history[user] = h
	}
	s.mu.Unlock()
	h.seed.Do(func() {
		// Not the caller's cancellation: the seed is read once for all.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		es, err := s.store.BudgetLedger(ctx, LedgerQuery{User: user, Limit: 20})
		if err != nil {
			s.log.WarnContext(ctx, "budget: read history", "user", user, "err", err.Error())
			return
		}
		for i := len(es) - 1; i >= 0; i-- {
			if e := es[i]; observable(e) {
				p, _ := s.prices.Lookup(e.Model)
				h.observe(e.Usage, p, e.RequestBytes)
			}
		}
	})
	return h
}

// observable says whether a call's usage tells what the user's calls
// consume: it completed, and nothing in it is estimated.
func observable(e Entry) bool { return e.Status == 200 && !e.Estimated }

// SetLimit creates or replaces a limit. This process uses it at once;
// others within their Options.LimitCacheTTL.
func (s *Service) SetLimit(ctx context.Context, l Limit) error {
	if err := l.validate(); err != nil {
		return err
	}
	if l.UpdatedAt.IsZero() {
		l.UpdatedAt = s.now()
	}
	if err := s.store.PutBudgetLimit(ctx, l); err != nil {
		return fmt.Errorf("budget: set limit: %w", err)
	}
	s.forget(l.Subject)
	return nil
}

// DeleteLimit removes a limit, if there is one.
func (s *Service) DeleteLimit(ctx context.Context, sub Subject, k Kind) error {
	if err := s.store.DeleteBudgetLimit(ctx, sub, k); err != nil {
		return fmt.Errorf("budget: delete limit: %w", err)
	}
	s.forget(sub)
	return nil
}

func (s *Service) forget(sub Subject) {
	s.mu.Lock()
	delete(s.limits, sub)
	// Slices reserved under the old limits admit nothing more; the next
	// call reserves under the new ones, or on its own.
	s.retireSlices(func(k sliceKey) bool { return k.covers(sub) })
	// Reads under way may predate the change: later calls read again.
	s.limitGen++
	clear(s.limitReads)
	s.mu.Unlock()
}

// Limits returns the limits of subjects, or every limit when none is given.
func (s *Service) Limits(ctx context.Context, subjects ...Subject) ([]Limit, error) {
	return s.store.BudgetLimits(ctx, subjects...)
}

// LimitStatus is a limit and where its subject stands against it now.
type LimitStatus struct {
	Limit
	Used   int64     // settled in the current window (requests admitted, for RequestsPerMinute)
	Held   int64     // held by calls in flight (their count, for Concurrent)
	Resets time.Time // end of the current calendar period; zero for the rolling window and Concurrent
}

// Status returns sub's limits and its use of each.
func (s *Service) Status(ctx context.Context, sub Subject) ([]LimitStatus, error) {
	now := s.now()
	limits, err := s.store.BudgetLimits(ctx, sub)
	if err != nil {
		return nil, err
	}
	held, err := s.store.BudgetHeld(ctx, sub, now)
	if err != nil {
		return nil, err
	}
	out := make([]LimitStatus, 0, len(limits))
	for _, l := range limits {
		st := LimitStatus{Limit: l}
		size, from := BucketDay, time.Time{}
		switch l.Kind {
		case Concurrent:
			st.Held = held.Count
			out = append(out, st)
			continue
		case SpendPer5h:
			size, from = Bucket5m, windowStart5h(now)
		case RequestsPerMinute:
			size = BucketMinute
			from, st.Resets, _ = periodStart(l.Kind, now)
		default:
			from, st.Resets, _ = periodStart(l.Kind, now)
		}
		bs, err := s.store.BudgetUsage(ctx, sub, size, from, now.Add(time.Minute))
		if err != nil {
			return nil, err
		}
		for _, b := range bs {
			switch {
			case l.Kind.Spend():
				st.Used += int64(b.Cost)
			case l.Kind == TokensPerDay:
				st.Used += b.Tokens
			default:
				st.Used += b.Requests
			}
		}
		switch {
		case l.Kind.Spend():
			st.Held = int64(held.Cost)
		case l.Kind == TokensPerDay:
			st.Held = held.Tokens
		}
		out = append(out, st)
	}
	return out, nil
}

// Ledger returns ledger entries, newest first.
func (s *Service) Ledger(ctx context.Context, q LedgerQuery) ([]Entry, error) {
	return s.store.BudgetLedger(ctx, q)
}

// Flush waits until every settlement handed to the service so far has been
// written (or given up), or ctx ends.
func (s *Service) Flush(ctx context.Context) error {
	s.flushing.Add(1)
	defer s.flushing.Add(-1)
	s.mu.Lock()
	close(s.kick)
	s.kick = make(chan struct{})
	s.mu.Unlock()
	select {
	case <-s.settling.Idle():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the background work and waits, until ctx ends, for the
// settlements in flight; those still unwritten then are abandoned (their
// reservations expire). Then it gives back what this process's slices hold
// beyond calls still in flight. Settlements after Close are written before
// Settle returns; admissions after Close each have a reservation of their
// own.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	err := s.Flush(ctx)
	s.stopBG() // background growths fail from now on
	s.growers.Wait()
	<-s.bgDone
	// Given back even when ctx has ended: what a slice holds beyond its
	// calls would otherwise stay held until it expires.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	s.Release(rctx)
	cancel()
	return err
}

// background renews the reservations of calls in flight and collects
// garbage, until Close.
func (s *Service) background() {
	defer close(s.bgDone)
	renew := time.NewTicker(s.o.ReservationTTL / 3)
	defer renew.Stop()
	collect := time.NewTicker(s.o.CollectInterval)
	defer collect.Stop()
	trim := time.NewTicker(min(scarceIdle, s.o.LeaseIdle))
	defer trim.Stop()
	for {
		select {
		case <-s.bg.Done():
			return
		case <-trim.C:
			ctx, cancel := context.WithTimeout(s.bg, settleAttempt)
			s.trimSlices(ctx, false)
			cancel()
		case <-renew.C:
			s.renew(s.bg)
		case <-collect.C:
			ctx, cancel := context.WithTimeout(s.bg, time.Minute)
			if err := s.store.CollectBudget(ctx, s.now()); err != nil && ctx.Err() == nil {
				s.log.Warn("budget: collect", "err", err.Error())
			}
			cancel()
		}
	}
}

// renew extends the reservations of this process's calls in flight and
// of its slices.
func (s *Service) renew(ctx context.Context) {
	s.mu.Lock()
	ids := make([]string, 0, len(s.live)+len(s.sliceByID))
	for id := range s.live {
		ids = append(ids, id)
	}
	ls := make([]*slice, 0, len(s.sliceByID))
	for id, l := range s.sliceByID {
		ids = append(ids, id)
		ls = append(ls, l)
	}
	s.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	now := s.now()
	expires := now.Add(s.o.ReservationTTL)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := s.store.RenewBudget(ctx, ids, now, expires); err != nil {
		if ctx.Err() == nil {
			s.log.Warn("budget: renew reservations", "count", len(ids), "err", err.Error())
		}
		return
	}
	// The store renews only what had not expired; so does this.
	for _, l := range ls {
		l.mu.Lock()
		if l.expires.After(now) && l.expires.Before(expires) {
			l.expires = expires
		}
		l.mu.Unlock()
	}
}
