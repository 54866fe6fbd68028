package controlplane

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/sse"
	"github.com/talkide/platform/internal/store"
)

// A hub shares one worker event stream among the browsers of a
// conversation on this replica. It follows the worker's stream from the
// first browser's replay point, keeps the most recent events in a ring,
// and hands each event to every subscriber's bounded queue without ever
// waiting for one.
//
// Exactly once, by sequence number: the hub passes on only events after
// the last it passed (the worker's stream may overlap after a reconnect),
// and every event after base is in its ring. A browser whose replay point
// is at or after base joins at once and gets the ring's events after its
// point, then the live tail; one whose point is older, or who fell so far
// behind that its queue filled, catches up on a worker stream of its own,
// paced by its own writes, and joins as soon as the event it last wrote
// is within the ring (the catch-up). Each browser's handler also drops
// what it has already written, so neither path repeats an event.
type hub struct {
	hs     *hubs
	conv   store.Conversation
	cancel context.CancelFunc

	mu sync.Mutex
	// guarded by mu
	base      int64        // every event after base is in ring
	ring      []relayEvent // the latest events, oldest first
	ringBytes int          // of the frames in ring
	subs      map[*subscriber]struct{}
	done      bool // ended: no subscriber joins any more
}

// maxBuffered bounds the bytes of a hub's ring, and twice it those of a
// subscriber's queue (which starts with the ring's): events are small (a text delta is a few hundred bytes), but a
// tool's output may be large, and a hub must not hold its StreamQueue
// events' worth of those.
const maxBuffered = 1 << 20

// relayEvent is one event of the conversation's log as a browser gets it:
// its SSE frame is encoded once for every browser.
type relayEvent struct {
	seq   int64
	frame []byte
}

// subscriber is one browser's place in a hub.
type subscriber struct {
	hub    *hub
	notify chan struct{} // a token when there is something to take; cap 1

	mu sync.Mutex
	// guarded by mu
	queue  []relayEvent
	bytes  int  // of the frames in queue
	lagged bool // the queue filled: the hub dropped this subscriber
	ended  bool // the hub ended (the worker has no session, or shutdown)
}

// hubs holds the hub of every conversation that browsers follow on this
// replica.
type hubs struct {
	s *Server
	// ring bounds each hub's ring and queue each subscriber's queue, in
	// events; both are also bounded by maxBuffered bytes.
	ring, queue int
	upstreams   atomic.Int64 // worker streams open now: hubs' and catch-ups'

	mu sync.Mutex
	m  map[string]*hub // by conversation id; guarded by mu
}

func newHubs(s *Server, ring, queue int) *hubs {
	return &hubs{s: s, ring: ring, queue: queue, m: map[string]*hub{}}
}

// join subscribes to the hub of conversation c from replay point after,
// starting the hub there if there is none. It returns nil when the hub
// started later than after: the caller catches up first.
func (hs *hubs) join(c store.Conversation, after int64) *subscriber {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	h := hs.m[c.ID]
	if h != nil {
		h.mu.Lock()
		if h.done { // its subscribers all lagged: replace it
			h.mu.Unlock()
			delete(hs.m, c.ID)
			h = nil
		}
	}
	var ctx context.Context
	if h == nil {
		ctx, h = hs.create(c, after)
		h.mu.Lock()
	}
	defer h.mu.Unlock()
	if after < h.base {
		return nil
	}
	if ctx != nil {
		// Only now, with the first subscriber in: a hub that published to
		// nobody would stop itself.
		go h.run(ctx, after)
	}
	sub := &subscriber{hub: h, notify: make(chan struct{}, 1), queue: make([]relayEvent, 0, min(hs.queue, 64))}
	h.each(func(ev relayEvent) {
		if ev.seq > after {
			sub.queue = append(sub.queue, ev)
			sub.bytes += len(ev.frame)
		}
	})
	if len(sub.queue) > 0 {
		sub.notify <- struct{}{}
	}
	h.subs[sub] = struct{}{}
	return sub
}

// create registers a new hub for c from after, which its first
// subscriber starts with the context returned; hs.mu is held.
func (hs *hubs) create(c store.Conversation, after int64) (context.Context, *hub) {
	ctx, cancel := context.WithCancel(hs.s.streams)
	h := &hub{hs: hs, conv: c, cancel: cancel, base: after,
		subs: map[*subscriber]struct{}{}}
	hs.m[c.ID] = h
	return ctx, h
}

// leave unsubscribes sub; the hub stops with its last subscriber.
func (hs *hubs) leave(sub *subscriber) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	h := sub.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, sub)
	if len(h.subs) == 0 {
		h.stopLocked()
	}
}

// following reports whether a hub follows conversation id's stream now,
// so that this replica sees its turns start and end as they do.
func (hs *hubs) following(id string) bool {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	h := hs.m[id]
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.done
}

// count returns the hubs open now.
func (hs *hubs) count() int {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	n := 0
	for _, h := range hs.m {
		h.mu.Lock()
		if !h.done {
			n++
		}
		h.mu.Unlock()
	}
	return n
}

// stopLocked ends the hub; hs.mu and h.mu are held.
func (h *hub) stopLocked() {
	if !h.done {
		h.done = true
		h.cancel()
	}
	if h.hs.m[h.conv.ID] == h {
		delete(h.hs.m, h.conv.ID)
	}
}

// end ends the hub and every subscriber's stream: the worker has no
// session for the conversation (or the worker cannot be looked up), and
// following it again would not change that.
func (h *hub) end() {
	h.hs.mu.Lock()
	defer h.hs.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	for sub := range h.subs {
		sub.mu.Lock()
		sub.ended = true
		sub.mu.Unlock()
		sub.wake()
	}
	clear(h.subs)
	h.stopLocked()
}

// each calls f with the ring's events, oldest first; h.mu is held.
func (h *hub) each(f func(relayEvent)) {
	for _, ev := range h.ring {
		f(ev)
	}
}

// publish hands ev to every subscriber and keeps it in the ring. A
// subscriber whose queue is full is dropped from the hub, never waited
// for; it catches up on its own.
func (h *hub) publish(ev relayEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ring = append(h.ring, ev)
	h.ringBytes += len(ev.frame)
	for len(h.ring) > h.hs.ring || (h.ringBytes > maxBuffered && len(h.ring) > 1) {
		h.base = h.ring[0].seq
		h.ringBytes -= len(h.ring[0].frame)
		h.ring[0] = relayEvent{} // its frame is garbage once no queue holds it
		h.ring = h.ring[1:]
	}
	for sub := range h.subs {
		if !sub.push(ev, h.hs.queue) {
			delete(h.subs, sub)
		}
	}
	// With no subscriber left (all lagged) the hub's work is done; the
	// laggards start a new one when they have caught up. leave cannot
	// run for them any more: stop here, without hs.mu, which join holds
	// while it takes h.mu; a done hub is skipped and replaced by join.
	if len(h.subs) == 0 && !h.done {
		h.done = true
		h.cancel()
	}
}

// push queues ev, or marks the subscriber lagged when its queue is full.
func (sub *subscriber) push(ev relayEvent, max int) bool {
	sub.mu.Lock()
	ok := len(sub.queue) == 0 || (len(sub.queue) < max && sub.bytes+len(ev.frame) <= 2*maxBuffered)
	if ok {
		sub.queue = append(sub.queue, ev)
		sub.bytes += len(ev.frame)
	} else {
		sub.lagged = true
	}
	sub.mu.Unlock()
	sub.wake()
	return ok
}

func (sub *subscriber) wake() {
	select {
	case sub.notify <- struct{}{}:
	default:
	}
}

// take returns the queued events (into buf, reused) and whether the hub
// dropped or ended this subscriber.
func (sub *subscriber) take(buf []relayEvent) (evs []relayEvent, lagged, ended bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	evs = append(buf[:0], sub.queue...)
	clear(sub.queue)
	sub.queue = sub.queue[:0]
	sub.bytes = 0
	return evs, sub.lagged, sub.ended
}

// run follows the worker's stream for the hub until the hub stops.
func (h *hub) run(ctx context.Context, after int64) {
	err := h.hs.follow(ctx, h.conv, after, func(ev relayEvent) error {
		h.publish(ev)
		return nil
	})
	if errors.Is(err, errStreamGone) {
		h.end()
	}
}

// errStreamGone: the worker has no session for the conversation, or the
// conversation's worker cannot be found; the browsers' streams end.
var errStreamGone = errors.New("the conversation's worker stream is gone")

// follow follows the worker's event stream of c after seq after, calling
// fn with each event of the log it has not passed on yet, in order. When
// the worker's stream breaks (a worker restart, a network fault) it
// reconnects after the last event it passed on, so fn sees neither a gap
// nor a duplicate. It returns nil when ctx ends, errStreamGone when the
// worker has no session, or fn's error.
func (hs *hubs) follow(ctx context.Context, c store.Conversation, after int64, fn func(relayEvent) error) error {
	s := hs.s
	hs.upstreams.Add(1)
	defer hs.upstreams.Add(-1)
	last := after
	// Reset once an event has passed: a stream that broke after
	// delivering is retried after the shortest pause, one that keeps
	// failing ever more slowly.
	bo := backoff.New(streamRetry)
	var frame bytes.Buffer
	for {
		// Resolve the worker on every attempt: a restarted worker may
		// have moved.
		wc, err := s.workerFor(ctx, c.Tenant, c.Env)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			s.log.Error("stream relay: worker lookup failed", "conversation", c.ID, "err", err)
			return errStreamGone
		}
		var fnErr error
		err = wc.streamEvents(ctx, c.ID, last, func(ev sse.Event) error {
			seq, err := strconv.ParseInt(ev.ID, 10, 64)
			if err != nil || seq <= last {
				return nil // not an event of the log, or one already passed on
			}
			s.activity.observe(c.ID, seq, ev)
			frame.Reset()
			if err := sse.Write(&frame, ev.ID, ev.Event, ev.Data); err != nil {
				return nil // an id or name no browser could parse; the worker never sends one
			}
			if fnErr = fn(relayEvent{seq: seq, frame: bytes.Clone(frame.Bytes())}); fnErr != nil {
				return fnErr
			}
			last = seq
			bo.Reset()
			return nil
		})
		if fnErr != nil {
			return fnErr
		}
		if ctx.Err() != nil {
			return nil
		}
		var he *httpapi.Error
		if errors.As(err, &he) && he.Status == http.StatusNotFound {
			s.log.Warn("stream relay: the worker has no session", "conversation", c.ID)
			return errStreamGone
		}
		d := bo.Next()
		s.log.Info("stream relay: worker stream ended; reconnecting", "conversation", c.ID, "after", last, "retry_in", d, "err", err)
		if backoff.Sleep(ctx, d) != nil {
			return nil
		}
	}
}

// streamRetry paces the relay's reconnects to a worker whose stream broke:
// a restarting worker is back within seconds, so the delay stays short.
var streamRetry = backoff.Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second}
