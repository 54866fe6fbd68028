// Package bodyroom bounds the bytes of request bodies a process holds in
// memory at once: in all, and for each caller. A request takes room for
// its body before it reads a byte of it (all of a declared length at
// once, or step by step as a body of unknown length grows) and gives the
// room back when it is done with the bytes. A request that finds no room
// is refused at once rather than queued, so that neither memory nor
// waiting connections pile up behind a burst; its client retries.
package bodyroom

import (
	"errors"
	"sync"
)

// ErrFull is room refused because the bound on all bodies is reached.
var ErrFull = errors.New("bodyroom: the bound on bodies held at once is reached")

// ErrKeyFull is room refused because the caller's own bodies already hold
// its share.
var ErrKeyFull = errors.New("bodyroom: the caller's share of the bodies held at once is reached")

// Room is the room for bodies in memory. A nil *Room bounds nothing. Its
// methods are safe for concurrent use.
type Room struct {
	total  int64
	perKey int64

	mu    sync.Mutex
	used  int64            // guarded by mu; bytes held now
	peak  int64            // guarded by mu; the most ever held
	byKey map[string]int64 // guarded by mu; bytes held now per key (perKey > 0)
}

// New returns room for total bytes of bodies at once, at most perKey of
// them for any one key (a user, say); perKey of 0 or less bounds no key
// but by total. A negative total bounds nothing: New returns nil.
func New(total, perKey int64) *Room {
	if total < 0 {
		return nil
	}
	r := &Room{total: total}
	if perKey > 0 {
		r.perKey = perKey
		r.byKey = make(map[string]int64)
	}
	return r
}

// Take takes room for n more bytes for key, or says which bound refused
// them: ErrKeyFull before ErrFull, so that a caller over its own share
// hears of that rather than of the others' load.
func (r *Room) Take(key string, n int64) error {
	if r == nil || n <= 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byKey != nil && r.byKey[key]+n > r.perKey {
		return ErrKeyFull
	}
	if r.used+n > r.total {
		return ErrFull
	}
	r.used += n
	r.peak = max(r.peak, r.used)
	if r.byKey != nil {
		r.byKey[key] += n
	}
	return nil
}

// Give gives back room for n bytes that key took.
func (r *Room) Give(key string, n int64) {
	if r == nil || n <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.used -= n
	if r.byKey != nil {
		if left := r.byKey[key] - n; left > 0 {
			r.byKey[key] = left
		} else {
			delete(r.byKey, key)
		}
	}
}

// State returns the bytes held now and the most ever held at once.
func (r *Room) State() (used, peak int64) {
	if r == nil {
		return 0, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.used, r.peak
}

// Limits returns the bounds New was given: total, and perKey (0 when no
// key has a share of its own). A nil Room returns -1, 0.
func (r *Room) Limits() (total, perKey int64) {
	if r == nil {
		return -1, 0
	}
	return r.total, r.perKey
}
