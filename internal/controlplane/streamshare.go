package controlplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/talkide/platform/internal/store"
)

// The defaults of sharing the stream counts (Options.StreamCounts).
const (
	// DefaultStreamShareInterval is how often a replica publishes its
	// counts and reads the others': the per-user and per-conversation
	// caps lag what the other replicas admitted by at most two of these.
	DefaultStreamShareInterval = 2 * time.Second
	// DefaultStreamShareTTL is how long a replica that stopped publishing
	// (it died, or lost the database) is still counted: long enough that
	// a few slow publications do not make a live replica's streams
	// vanish, short enough that a dead one's are soon free again.
	DefaultStreamShareTTL = 15 * time.Second
)

// subject is what a per-user or per-conversation count is of.
type subject struct{ kind, id string }

// elsewhere is what the other replicas last published, summed: read-only
// once made, so that an admission reads it without a lock.
type elsewhere struct {
	users, convs map[string]int
	read         time.Time // when it was read, on the process's clock
}

func newReplicaID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("controlplane: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// ReplicaID names this process among the control-plane replicas that
// share their stream counts: random per process, so that a restarted
// replica never inherits the counts of its former self.
func (s *Server) ReplicaID() string { return s.replica }

// ShareStreamCounts publishes this replica's open streams per user and per
// conversation to Options.StreamCounts every Options.StreamShareInterval,
// reads the other replicas' sums, which admissions then add to the
// replica's own live counts, and sweeps the replicas whose heartbeat is
// older than the TTL. It returns when ctx ends, without withdrawing the
// counts: that is WithdrawStreamCounts, once no stream is left to release.
// Without Options.StreamCounts it returns at once.
//
// A publication or a read that fails is logged and retried at the next
// tick; the other replicas' counts are dropped once they are older than
// the TTL, so that a replica that cannot reach the store falls back to
// counting its own streams rather than refusing on stale figures.
func (s *Server) ShareStreamCounts(ctx context.Context) {
	sc := s.cfg.StreamCounts
	if sc == nil {
		return
	}
	interval, ttl := s.cfg.StreamShareInterval, s.cfg.StreamShareTTL
	t := time.NewTicker(interval)
	defer t.Stop()
	whole := true
	var swept time.Time
	for {
		whole = !s.publishStreamCounts(ctx, sc, whole)
		now := time.Now()
		if cs, err := sc.OtherStreamCounts(ctx, s.replica, now.Add(-ttl)); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("could not read the other replicas' stream counts", "err", err)
			if e := s.caps.elsewhere.Load(); e != nil && now.Sub(e.read) > ttl {
				s.caps.elsewhere.Store(nil)
				s.log.Warn("the stream caps count this replica's streams only until the store answers again")
			}
		} else {
			s.caps.elsewhere.Store(sumElsewhere(cs, now))
		}
		if now.Sub(swept) >= ttl {
			// Any replica may sweep: each removes only heartbeats past
			// the TTL, whoever wrote them.
			if _, err := sc.SweepStreamCounts(ctx, now.Add(-2*ttl)); err != nil && ctx.Err() == nil {
				s.log.Warn("could not sweep the stream counts of dead replicas", "err", err)
			}
			swept = now
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// publishStreamCounts publishes what changed since the last publication
// (everything, with whole, or when the store no longer knows this
// replica) and reports whether it succeeded: a failed one is followed by a
// whole one, since what it carried is no longer marked as changed.
func (s *Server) publishStreamCounts(ctx context.Context, sc store.StreamCounts, whole bool) bool {
	cs := s.caps.changes(whole)
	known, err := sc.PublishStreamCounts(ctx, s.replica, time.Now(), cs, whole)
	if err == nil && !known {
		cs = s.caps.changes(true)
		_, err = sc.PublishStreamCounts(ctx, s.replica, time.Now(), cs, true)
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("could not publish this replica's stream counts", "err", err)
		}
		return false
	}
	return true
}

// WithdrawStreamCounts removes this replica's counts from the store, so
// that the other replicas stop counting them at once rather than after the
// TTL. Call it after ShareStreamCounts has returned and the streams have
// ended (a shutdown); without Options.StreamCounts it does nothing.
func (s *Server) WithdrawStreamCounts(ctx context.Context) error {
	if s.cfg.StreamCounts == nil {
		return nil
	}
	return s.cfg.StreamCounts.WithdrawStreamCounts(ctx, s.replica)
}

func sumElsewhere(cs []store.StreamCount, read time.Time) *elsewhere {
	e := &elsewhere{users: map[string]int{}, convs: map[string]int{}, read: read}
	for _, c := range cs {
		switch c.Kind {
		case store.StreamsOfUser:
			e.users[c.Subject] += int(c.Streams)
		case store.StreamsOfConversation:
			e.convs[c.Subject] += int(c.Streams)
		}
	}
	return e
}
