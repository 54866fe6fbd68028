package budget

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Denial is a call refused by a limit. Its message says which limit, and
// holds nothing of other subjects.
type Denial struct {
	Limit Limit
	// Used is what has been settled in the limit's window; Held what calls
	// in flight hold; Need what this call asks for. All in the limit's unit.
	Used, Held, Need int64
	// InFlight is true when Used+Need fits and only the calls in flight stand
	// in the way: a retry soon, after they settle, may pass.
	InFlight bool
	// RetryAfter is the earliest a retry can pass, as far as is known now.
	RetryAfter time.Duration
	// Resets is when the limit's window next frees room, if known.
	Resets time.Time
	// MidStream is true when a hard limit stopped a stream under way.
	MidStream bool
}

func (d *Denial) Error() string {
	var b strings.Builder
	k := d.Limit.Kind
	fmt.Fprintf(&b, "budget: %s %s reached: ", d.Limit.Subject, k.describe())
	switch k {
	case Concurrent:
		fmt.Fprintf(&b, "%d calls in flight, the limit is %d", d.Held, d.Limit.Max)
	case RequestsPerMinute:
		fmt.Fprintf(&b, "%d requests this minute, the limit is %d", d.Used, d.Limit.Max)
	default:
		fmt.Fprintf(&b, "%s used, %s held by calls in flight, this call needs %s, the limit is %s",
			k.format(d.Used), k.format(d.Held), k.format(d.Need), k.format(d.Limit.Max))
	}
	switch {
	case d.MidStream:
		// Whoever reads this sees a truncated reply: say so first, then
		// when the limit lets the next call through.
		b.WriteString("; the response was cut off here")
		if !d.InFlight && !d.Resets.IsZero() {
			fmt.Fprintf(&b, "; room frees up at %s", d.Resets.UTC().Format(time.RFC3339))
		}
	case d.Need > d.Limit.Max && k != Concurrent && k != RequestsPerMinute:
		b.WriteString("; this call alone is more than the limit")
	case d.InFlight:
		b.WriteString("; retry when calls in flight have finished")
	case !d.Resets.IsZero():
		fmt.Fprintf(&b, "; room frees up at %s", d.Resets.UTC().Format(time.RFC3339))
	}
	return b.String()
}

// Retry-after bounds.
const (
	minRetry = time.Second
)

// snapshotQuery returns what evaluating limits needs loaded.
func snapshotQuery(limits []Limit, subjects []Subject, now time.Time) SnapshotQuery {
	q := SnapshotQuery{Now: now}
	for _, s := range subjects {
		for _, l := range limits {
			if l.Subject == s {
				q.Subjects = append(q.Subjects, s)
				break
			}
		}
	}
	for _, l := range limits {
		switch l.Kind {
		case SpendPerDay, SpendPerWeek, SpendPerMonth, TokensPerDay:
			start, _, _ := periodStart(l.Kind, now)
			if q.DaysFrom.IsZero() || start.Before(q.DaysFrom) {
				q.DaysFrom = start
			}
		case SpendPer5h:
			q.FiveMinFrom = Bucket5m.Start(now.Add(-fiveHours))
		case RequestsPerMinute:
			q.MinuteFrom = BucketMinute.Start(now)
		}
	}
	return q
}

// evaluate decides an admission of r against limits on snap: nil, or the
// *Denial with the latest RetryAfter among the limits r would break.
func evaluate(limits []Limit, snap *Snapshot, r Reservation, now time.Time, inFlightRetry time.Duration) error {
	var worst *Denial
	for _, l := range limits {
		d := check(l, snap, r, now, inFlightRetry)
		if d != nil && (worst == nil || d.RetryAfter > worst.RetryAfter) {
			worst = d
		}
	}
	if worst != nil {
		return worst
	}
	return nil
}

// check evaluates one limit.
func check(l Limit, snap *Snapshot, r Reservation, now time.Time, inFlightRetry time.Duration) *Denial {
	d := &Denial{Limit: l}
	d.Used, d.Held, d.Need = standing(l, snap, r, now)
	if d.Used+d.Held+d.Need <= l.Max {
		return nil
	}
	d.classify(snap, now, inFlightRetry)
	return d
}

// standing returns where l's subject stands in l's unit: what has been
// settled in its window, what the live reservations other than r hold,
// and what r asks for.
func standing(l Limit, snap *Snapshot, r Reservation, now time.Time) (used, held, need int64) {
	h := snap.Held[l.Subject]
	switch l.Kind {
	case Concurrent:
		return 0, h.Count, 1
	case RequestsPerMinute:
		if snap.Exists {
			return 0, 0, 0 // not a new request
		}
		start, _, _ := periodStart(l.Kind, now)
		return sumBuckets(snap.Buckets, l.Subject, BucketMinute, start, func(b Bucket) int64 { return b.Requests }), 0, 1
	case TokensPerDay:
		start, _, _ := periodStart(l.Kind, now)
		return sumBuckets(snap.Buckets, l.Subject, BucketDay, start, func(b Bucket) int64 { return b.Tokens }), h.Tokens, r.Tokens
	case SpendPer5h:
		return sumBuckets(snap.Buckets, l.Subject, Bucket5m, windowStart5h(now), func(b Bucket) int64 { return int64(b.Cost) }),
			int64(h.Cost), int64(r.Cost)
	}
	// calendar spend
	start, _, _ := periodStart(l.Kind, now)
	return sumBuckets(snap.Buckets, l.Subject, BucketDay, start, func(b Bucket) int64 { return int64(b.Cost) }),
		int64(h.Cost), int64(r.Cost)
}

// classify says, of a denial whose Used, Held and Need are set, whether
// only calls in flight stand in the way and when a retry can pass.
func (d *Denial) classify(snap *Snapshot, now time.Time, inFlightRetry time.Duration) {
	l := d.Limit
	d.InFlight, d.Resets = false, time.Time{}
	if l.Kind == Concurrent {
		d.InFlight = d.Need <= l.Max
		d.RetryAfter = inFlightRetry
		return
	}
	if d.Used+d.Need <= l.Max {
		d.InFlight = true
		d.RetryAfter = inFlightRetry
		return
	}
	d.Resets = resets(l, snap, now, d.Used+d.Need-l.Max)
	d.RetryAfter = max(d.Resets.Sub(now), minRetry)
}

// windowStart5h is the start of the oldest five-minute bucket that overlaps
// the five hours before now.
func windowStart5h(now time.Time) time.Time {
	return Bucket5m.Start(now.Add(-fiveHours))
}

// resets returns when enough of l's window will have passed for excess to
// fit: the next period for calendar limits; for the rolling window, when
// the oldest buckets holding at least excess have left it.
func resets(l Limit, snap *Snapshot, now time.Time, excess int64) time.Time {
	if l.Kind != SpendPer5h {
		_, next, _ := periodStart(l.Kind, now)
		return next
	}
	var bs []Bucket
	from := windowStart5h(now)
	for _, b := range snap.Buckets {
		if b.Subject == l.Subject && b.Size == Bucket5m && !b.Start.Before(from) {
			bs = append(bs, b)
		}
	}
	slices.SortFunc(bs, func(a, b Bucket) int { return a.Start.Compare(b.Start) })
	var freed int64
	for _, b := range bs {
		freed += int64(b.Cost)
		if freed >= excess {
			return b.Start.Add(fiveMinutes + fiveHours)
		}
	}
	// Even an empty window is not enough: the call alone is over the limit.
	return now.Add(fiveHours)
}

func sumBuckets(bs []Bucket, s Subject, size BucketSize, from time.Time, f func(Bucket) int64) int64 {
	var n int64
	for _, b := range bs {
		if b.Subject == s && b.Size == size && !b.Start.Before(from) {
			n += f(b)
		}
	}
	return n
}
