package budget

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Store is the budget's persistence. *sqlite.Store and *postgres.Store
// implement it on the control-plane's database (migration
// 0003_budgets.sql); budgettest.Run is the conformance suite both pass.
//
// Every method is safe for concurrent use, also from several processes
// sharing one database. Times are kept to the millisecond.
type Store interface {
	// ReserveBudget admits r atomically. It serialises with every other
	// ReserveBudget whose q.Subjects overlap (across processes), then loads
	// the Snapshot q asks for, as one consistent view taken after it got the
	// lock, and calls admit with it and a copy of r. When admit returns an
	// error, nothing is written and that error is returned. Otherwise the
	// copy is stored as admit left it (admit may change its Cost and Tokens,
	// nothing else): inserted, or when a reservation with r.ID exists, its
	// Cost, Tokens and ExpiresAt replaced. A reservation new to the store
	// also counts one request in the minute bucket of r.CreatedAt of each
	// of q.Subjects.
	ReserveBudget(ctx context.Context, r Reservation, q SnapshotQuery, admit func(*Snapshot, *Reservation) error) error

	// RenewBudget moves the expiry of the live reservations among ids to
	// expires, never earlier than it is (a growth may have moved it past).
	// A reservation that has already expired at now is not renewed: an
	// admission may have discounted it.
	RenewBudget(ctx context.Context, ids []string, now, expires time.Time) error

	// SettleBudget records e in the ledger and deletes the reservation e.ID.
	// When the ledger already holds e.ID it changes nothing else and applied
	// is false: a settlement can be retried without charging twice.
	// Otherwise e's cost, tokens and one request are added to the day and
	// five-minute buckets of e.SettledAt of e's user, tenant and env.
	SettleBudget(ctx context.Context, e Entry) (applied bool, err error)

	// SettleBudgetBatch records each of es as SettleBudget does, all in one
	// transaction, and reports for each whether it was applied. With lease
	// nil it deletes the reservation of each entry's ID, as SettleBudget
	// does. Otherwise the entries were admitted from a slice (lease.go): no
	// reservation of theirs is deleted; instead the reservation lease.ID, if
	// it exists, is set to hold lease.Cost and lease.Tokens, or deleted when
	// both are zero; its expiry stays. An empty es with a lease only resizes
	// the slice.
	SettleBudgetBatch(ctx context.Context, es []Entry, lease *SliceSize) (applied []bool, err error)

	// CollectBudget deletes what no admission reads any more: reservations
	// expired for an hour, five-minute buckets older than six hours and
	// minute buckets older than ten minutes. Day buckets and the ledger stay.
	CollectBudget(ctx context.Context, now time.Time) error

	// PutBudgetLimit creates or replaces the limit of l's subject and kind.
	PutBudgetLimit(ctx context.Context, l Limit) error
	// DeleteBudgetLimit removes a limit; removing one that does not exist
	// is not an error.
	DeleteBudgetLimit(ctx context.Context, s Subject, k Kind) error
	// BudgetLimits returns the limits of the given subjects, or of every
	// subject when none is given, ordered by scope, subject and kind.
	BudgetLimits(ctx context.Context, subjects ...Subject) ([]Limit, error)

	// BudgetUsage returns s's buckets of one size whose start is in
	// [from, to), oldest first.
	BudgetUsage(ctx context.Context, s Subject, size BucketSize, from, to time.Time) ([]Bucket, error)
	// BudgetHeld sums the reservations of s that are live at now.
	BudgetHeld(ctx context.Context, s Subject, now time.Time) (Held, error)
	// BudgetLedger returns ledger entries newest first (SettledAt, then ID,
	// descending).
	BudgetLedger(ctx context.Context, q LedgerQuery) ([]Entry, error)
}

// Reservation is money (and tokens) held for a call in flight.
type Reservation struct {
	ID                string // the call's ID
	User, Tenant, Env string
	Cost              Money
	Tokens            int64
	CreatedAt         time.Time
	ExpiresAt         time.Time
	// Slice is true for a slice (lease.go): money held for calls admitted
	// in memory, not a call. It does not count under concurrency limits.
	Slice bool
}

// Calls is how many calls r counts for under a concurrency limit.
func (r Reservation) Calls() int64 {
	if r.Slice {
		return 0
	}
	return 1
}

// Subjects returns the user, tenant and env of r.
func (r Reservation) Subjects() []Subject {
	return []Subject{User(r.User), Tenant(r.Tenant), Env(r.Tenant, r.Env)}
}

// SliceSize is what a slice's reservation holds after a settlement: its
// money and tokens, with the settled calls' costs moved to the ledger.
type SliceSize struct {
	ID     string
	Cost   Money
	Tokens int64
}

// BucketSize is the span of a usage bucket.
type BucketSize string

// Bucket sizes.
const (
	BucketDay    BucketSize = "day"    // spend, tokens and requests settled in a UTC day
	Bucket5m     BucketSize = "5m"     // the same, in five minutes: the rolling window
	BucketMinute BucketSize = "minute" // requests admitted in a clock minute
)

// Span returns the length of a bucket of size z.
func (z BucketSize) Span() time.Duration {
	switch z {
	case BucketDay:
		return 24 * time.Hour
	case Bucket5m:
		return fiveMinutes
	case BucketMinute:
		return time.Minute
	}
	return 0
}

// Start returns the start of the bucket of size z that holds t.
func (z BucketSize) Start(t time.Time) time.Time {
	return t.UTC().Truncate(z.Span())
}

// Bucket is the usage of one subject in one span of time.
type Bucket struct {
	Subject  Subject
	Size     BucketSize
	Start    time.Time
	Cost     Money
	Tokens   int64
	Requests int64
}

// Held is what the live reservations of one subject hold.
type Held struct {
	Cost   Money
	Tokens int64
	Count  int64 // calls: slices count none (Reservation.Calls)
}

// SnapshotQuery says what ReserveBudget loads: the buckets of Subjects of
// each size from the given time (none of a size whose time is zero), and
// the reservations of Subjects.
type SnapshotQuery struct {
	Subjects    []Subject
	DaysFrom    time.Time
	FiveMinFrom time.Time
	MinuteFrom  time.Time
	Now         time.Time // reservations expiring at or before Now are not live
}

// Snapshot is the state an admission decides on.
type Snapshot struct {
	Buckets []Bucket
	// Held sums, per subject of the query, the live reservations other than
	// the one being admitted.
	Held map[Subject]Held
	// Own is the live reservation with the admitted ID, if any; Exists says
	// whether one is stored at all, live or expired.
	Own    *Reservation
	Exists bool
}

// Entry is one ledger row: one forwarded call and what it cost.
type Entry struct {
	ID                              string // idempotency key: the gateway's request id
	Tenant, Env, User, Conversation string
	Usage                           // Model is the model billed
	Cost                            Money
	Reserved                        Money // what the call held at its end
	RequestBytes                    int64
	Status                          int  // upstream HTTP status, 0 when none came
	Streamed                        bool //
	Estimated                       bool // part of the usage is an estimate (see docs/budgets.md)
	StartedAt, SettledAt            time.Time
}

// LedgerQuery selects ledger entries; empty fields match everything.
type LedgerQuery struct {
	User, Tenant, Env, Conversation string
	From, To                        time.Time // SettledAt in [From, To); zero: unbounded
	Limit                           int       // at most this many; 0: all
}

// SettledBuckets returns what settling the entries of es that applied
// says were new adds to the usage buckets: for each, its cost, its tokens
// and one request in the day and five-minute buckets of its SettledAt, of
// its user, tenant and env; summed per bucket, and ordered by subject,
// size and start, so that stores that add them in this order never make
// two settlements wait for each other in a cycle.
func SettledBuckets(es []Entry, applied []bool) []Bucket {
	type key struct {
		sub   Subject
		size  BucketSize
		start int64
	}
	sums := map[key]*Bucket{}
	for i, e := range es {
		if !applied[i] {
			continue
		}
		for _, sub := range []Subject{User(e.User), Tenant(e.Tenant), Env(e.Tenant, e.Env)} {
			for _, size := range []BucketSize{BucketDay, Bucket5m} {
				start := size.Start(e.SettledAt)
				k := key{sub, size, start.UnixMilli()}
				b := sums[k]
				if b == nil {
					b = &Bucket{Subject: sub, Size: size, Start: start}
					sums[k] = b
				}
				b.Cost += e.Cost
				b.Tokens += e.Usage.Tokens()
				b.Requests++
			}
		}
	}
	out := make([]Bucket, 0, len(sums))
	for _, b := range sums {
		out = append(out, *b)
	}
	slices.SortFunc(out, func(a, b Bucket) int {
		return cmp.Or(strings.Compare(string(a.Subject.Scope), string(b.Subject.Scope)), strings.Compare(a.Subject.ID, b.Subject.ID),
			strings.Compare(string(a.Size), string(b.Size)), a.Start.Compare(b.Start))
	})
	return out
}

// BatchName names a settlement batch in errors: its first entry and how
// many more, or the slice it resizes.
func BatchName(es []Entry, lease *SliceSize) string {
	switch {
	case len(es) == 0 && lease != nil:
		return "slice " + lease.ID
	case len(es) == 0:
		return "nothing"
	case len(es) == 1:
		return es[0].ID
	}
	return fmt.Sprintf("%s and %d more", es[0].ID, len(es)-1)
}
