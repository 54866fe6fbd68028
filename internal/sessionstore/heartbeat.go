package sessionstore

import (
	"sync"
	"time"
)

// Heartbeat is what this process's own beats let it write. Among replicas
// each one beats into a registry its peers read (internal/replicaset), and
// each beat promises: "I write under my session leases only until this
// beat's time plus its window, less MaxClockSkew, unless I beat again". A
// peer that finds a lease whose holder's last beat is older than that
// window plus MaxClockSkew (Options.PeerBeatEnds) takes it over then, not
// once the lease itself expires: a crashed replica's conversations move
// within a beat window instead of a lease's TTL.
//
// Keeping the promise takes two rules. A lease is written under only while
// the last beat's window lasts. And once the beats lapse (a beat whose write
// ended after the window of the one before had closed, or the first beat),
// a lease taken before that beat ended is never written under again: a peer
// may have taken it over while this process could not beat. Its session
// reports ErrFenced and is reopened under a new lease.
//
// The zero value has had no beat: nothing may be written under its leases.
// Its methods are safe for concurrent use.
type Heartbeat struct {
	mu sync.Mutex
	// guarded by mu
	ends  time.Time // the last beat's time plus its window
	since time.Time // when the beat that began the current unbroken run ended
}

// Beat records a beat written: the time it carries (stamp), when its
// write had ended (done) and its window. The registry calls it after
// every entry it wrote (replicaset.Options.OnBeat).
func (h *Heartbeat) Beat(stamp, done time.Time, window time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ends.IsZero() || !done.Before(h.ends.Add(-MaxClockSkew)) {
		h.since = done
	}
	if e := stamp.Add(window); e.After(h.ends) {
		h.ends = e
	}
}

// allows reports whether a lease taken at taken may be written under at
// now. A nil Heartbeat (a store without peers that read beats) allows all.
func (h *Heartbeat) allows(taken, now time.Time) bool {
	if h == nil {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return !taken.Before(h.since) && now.Before(h.ends.Add(-MaxClockSkew))
}

// lost reports whether the beats lapsed after a lease taken at taken was:
// it is never written under again.
func (h *Heartbeat) lost(taken time.Time) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.since.After(taken)
}
