package controlplane

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/sse"
	"github.com/talkide/platform/internal/store"
)

// handleStream relays the conversation's event stream to the browser. The
// worker's sequence numbers pass through as SSE ids, so the browser's
// Last-Event-ID is also our replay point at the worker; the browser sees
// each event exactly once, whatever breaks in between (hub.go).
//
// A stream takes a slot of the caps (per user, per conversation, in
// total) before anything else is done for it, and gives it back when the
// handler returns, however the stream ended.
func (s *Server) handleStream(w http.ResponseWriter, r *http.Request) error {
	after, err := httpapi.ReplayPoint(r)
	if err != nil {
		return err
	}
	c, err := s.conversation(r)
	if err != nil {
		return err
	}
	release, err := s.caps.acquire(userOf(r), c.ID)
	if err != nil {
		// The client holds too many streams: the connection's descriptor
		// is what it is spending, so it does not keep it either.
		w.Header().Set("Connection", "close")
		return err
	}
	defer release()
	if _, err := s.workerFor(r.Context(), c.Tenant, c.Env); err != nil {
		return err
	}
	if _, err := sse.Begin(w); err != nil {
		return err
	}
	rc := http.NewResponseController(w)

	// The relay and the heartbeat both write; mu orders them. The
	// heartbeat goroutine is gone before we return (wg.Wait runs after
	// cancel): a ResponseWriter may not be used once the handler has
	// returned. A browser that does not take a write within
	// StreamWriteTimeout is cut off (it reconnects with Last-Event-ID): a
	// stalled reader holds no slot for ever.
	var mu sync.Mutex
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.streams, cancel)
	defer stop()
	write := func(f func() error) error {
		mu.Lock()
		defer mu.Unlock()
		rc.SetWriteDeadline(time.Now().Add(s.cfg.StreamWriteTimeout))
		err := f()
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			cancel()
		}
		return err
	}
	wg.Go(func() {
		t := time.NewTicker(s.cfg.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				write(func() error { return sse.WriteComment(w, "heartbeat") })
			}
		}
	})

	f := &follower{s: s, conv: c, last: after, write: func(frames [][]byte) error {
		return write(func() error {
			for _, b := range frames {
				if _, err := w.Write(b); err != nil {
					return err
				}
			}
			return nil
		})
	}}
	f.run(ctx)
	return nil
}

// follower is one browser's stream: it follows the conversation's hub,
// or catches up on a worker stream of its own until it can.
type follower struct {
	s     *Server
	conv  store.Conversation
	last  int64 // the last event written to the browser
	write func(frames [][]byte) error
	buf   []relayEvent
	out   [][]byte
}

// errJoined ends a catch-up that has reached its hub.
var errJoined = errors.New("joined the hub")

// run writes the conversation's events after f.last until ctx ends, the
// browser stops taking them, or the worker has no session.
func (f *follower) run(ctx context.Context) {
	hs := f.s.hubs
	for ctx.Err() == nil {
		if sub := hs.join(f.conv, f.last); sub != nil {
			lagged := f.relay(ctx, sub)
			hs.leave(sub)
			if !lagged {
				return
			}
			f.s.log.Debug("stream relay: a browser fell behind its hub; catching up", "conversation", f.conv.ID, "after", f.last)
			continue
		}
		// The hub started after our replay point, or has moved on past
		// it: catch up on a worker stream of our own.
		var joined *subscriber
		cctx, cancel := context.WithCancel(ctx)
		err := hs.follow(cctx, f.conv, f.last, func(ev relayEvent) error {
			if err := f.send([]relayEvent{ev}); err != nil {
				return err
			}
			if joined = hs.join(f.conv, f.last); joined != nil {
				return errJoined
			}
			return nil
		})
		cancel()
		if joined == nil {
			return // ctx ended, the browser left, or errStreamGone
		}
		if !errors.Is(err, errJoined) {
			hs.leave(joined)
			return
		}
		lagged := f.relay(ctx, joined)
		hs.leave(joined)
		if !lagged {
			return
		}
	}
}

// relay writes what the hub hands sub until the hub drops it (true: it
// lagged) or ends, ctx ends, or a write fails (false).
func (f *follower) relay(ctx context.Context, sub *subscriber) (lagged bool) {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-sub.notify:
		}
		evs, lagged, ended := sub.take(f.buf)
		f.buf = evs
		if err := f.send(evs); err != nil {
			return false
		}
		if lagged || ended {
			return lagged
		}
	}
}

// send writes the events after f.last, in one flush.
func (f *follower) send(evs []relayEvent) error {
	f.out = f.out[:0]
	last := f.last
	for _, ev := range evs {
		if ev.seq > last {
			f.out = append(f.out, ev.frame)
			last = ev.seq
		}
	}
	if len(f.out) == 0 {
		return nil
	}
	if err := f.write(f.out); err != nil {
		return err
	}
	f.last = last
	return nil
}
