package controlplane

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/sse"
)

// handleStream relays the worker's event stream to the browser. The worker's
// sequence numbers pass through as SSE ids, so the browser's Last-Event-ID is
// also our replay point at the worker. When the worker's stream breaks (a
// worker restart, a network fault) the relay reconnects after the last event
// it passed on: the browser sees neither a gap nor a duplicate.
func (s *Server) handleStream(w http.ResponseWriter, r *http.Request) error {
	after, err := httpapi.ReplayPoint(r)
	if err != nil {
		return err
	}
	c, err := s.conversation(r)
	if err != nil {
		return err
	}
	if _, err := s.workerFor(r.Context(), c.Tenant, c.Env); err != nil {
		return err
	}
	flusher, err := sse.Begin(w)
	if err != nil {
		return err
	}

	// The relay and the heartbeat both write; mu orders them. The heartbeat
	// goroutine is gone before we return (wg.Wait runs after cancel): a
	// ResponseWriter may not be used once the handler has returned.
	var mu sync.Mutex
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.streams, cancel)
	defer stop()
	wg.Go(func() {
		t := time.NewTicker(s.cfg.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				mu.Lock()
				err := sse.WriteComment(w, "heartbeat")
				if err == nil {
					flusher.Flush()
				}
				mu.Unlock()
			}
		}
	})

	last := after
	// Reset once an event has passed: a stream that broke after delivering
	// is retried after the shortest pause, one that keeps failing ever more
	// slowly.
	bo := backoff.New(streamRetry)
	for {
		// Resolve the worker on every attempt: a restarted worker may have
		// moved.
		wc, err := s.workerFor(ctx, c.Tenant, c.Env)
		if err != nil {
			s.log.Error("stream relay: worker lookup failed", "conversation", c.ID, "err", err)
			return nil
		}
		err = wc.streamEvents(ctx, c.ID, last, func(ev sse.Event) error {
			seq, err := strconv.ParseInt(ev.ID, 10, 64)
			if err != nil || seq <= last {
				return nil // not an event of the log, or one already passed on
			}
			mu.Lock()
			defer mu.Unlock()
			if err := sse.Write(w, ev.ID, ev.Event, ev.Data); err != nil {
				return err
			}
			flusher.Flush()
			last = seq
			bo.Reset()
			return nil
		})
		if ctx.Err() != nil {
			return nil
		}
		var he *httpapi.Error
		if errors.As(err, &he) && he.Status == http.StatusNotFound {
			s.log.Warn("stream relay: the worker has no session", "conversation", c.ID)
			return nil
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
