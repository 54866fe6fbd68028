package chatclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/sse"
)

var (
	errIdle           = errors.New("chatclient: stream idle for too long")
	errNotEventStream = errors.New("chatclient: stream answer is not text/event-stream")
)

// Stream follows conversation id's events with seq > after, calling fn for
// each in order from one goroutine. When the stream ends or breaks, or stays
// silent (not even a heartbeat) for too long, Stream reconnects with
// Last-Event-ID set to the last seq it delivered, backing off up to a few
// seconds; events at or below that seq are dropped, so fn sees each event at
// most once and in order.
//
// Stream returns nil when ctx ends, fn's error when fn fails, an *APIError
// for an answer that retrying cannot fix (a 4xx status other than 408 and
// 429), and an error for a stream it cannot parse (an event line over 1 MiB,
// a body that is not an event stream).
func (c *Client) Stream(ctx context.Context, id string, after int64, fn func(contract.Event) error) error {
	u, err := c.conversationURL(id, "/stream")
	if err != nil {
		return err
	}
	log := c.log.With("conversation", id)
	last := max(after, 0)
	b := backoff.New(c.streamRetry)
	for {
		delivered, fnErr, err := c.streamOnce(ctx, u, id, &last, fn, log)
		if fnErr != nil {
			return fnErr
		}
		if ctx.Err() != nil {
			return nil
		}
		if permanent(err) {
			return err
		}
		if delivered > 0 {
			b.Reset()
		}
		d := b.Next()
		log.Info("chatclient: stream interrupted; reconnecting", "last_seq", last, "delay", d, "err", err)
		if backoff.Sleep(ctx, d) != nil {
			return nil
		}
	}
}

// permanent reports whether a stream failure would recur on reconnecting.
func permanent(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status >= 400 && ae.Status < 500 &&
			ae.Status != http.StatusRequestTimeout && ae.Status != http.StatusTooManyRequests
	}
	return errors.Is(err, sse.ErrLineTooLong) || errors.Is(err, errNotEventStream) || errors.Is(err, errBodyTooLarge)
}

// streamOnce reads one connection's worth of events, advancing *last. It
// returns how many events it delivered, fn's error if fn failed, and why the
// connection ended otherwise (io.EOF when the server closed it).
func (c *Client) streamOnce(ctx context.Context, u, id string, last *int64, fn func(contract.Event) error, log *slog.Logger) (delivered int, fnErr, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The watchdog covers the wait for the answer's header too.
	idle := time.AfterFunc(c.idleTimeout, func() { cancel(errIdle) })
	defer idle.Stop()

	if *last > 0 {
		u += "?after=" + strconv.FormatInt(*last, 10)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("chatclient: %w", err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	if *last > 0 {
		// The query and the header say the same, so it does not matter
		// which one the server prefers.
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*last, 10))
	}
	c.authorize(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, idleCause(ctx, &transportError{err})
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, err := readLimited(resp.Body)
		if err != nil {
			return 0, nil, idleCause(ctx, err)
		}
		return 0, nil, apiError(resp.StatusCode, data)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return 0, nil, fmt.Errorf("%w (Content-Type %q)", errNotEventStream, resp.Header.Get("Content-Type"))
	}

	r := sse.NewReader(&idleReader{r: resp.Body, t: idle, d: c.idleTimeout}, maxSSELine)
	for {
		sev, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return delivered, nil, io.EOF
			}
			if errors.Is(err, sse.ErrLineTooLong) {
				return delivered, nil, err
			}
			return delivered, nil, idleCause(ctx, &transportError{err})
		}
		var ev contract.Event
		if err := json.Unmarshal(sev.Data, &ev); err != nil {
			log.Warn("chatclient: dropping malformed event", "sse_id", sev.ID, "err", err)
			continue
		}
		if err := ev.ValidateParent(); err != nil {
			log.Warn("chatclient: ignoring an event's malformed parent", "seq", ev.Seq, "err", err)
			ev.ParentToolUseID = ""
		}
		if ev.ConversationID != "" && ev.ConversationID != id {
			log.Warn("chatclient: dropping event of another conversation", "seq", ev.Seq, "other", ev.ConversationID)
			continue
		}
		if ev.Seq <= *last {
			continue // a replay overlapping what was delivered
		}
		if ev.Seq != *last+1 && *last > 0 {
			log.Warn("chatclient: gap in event sequence", "last_seq", *last, "seq", ev.Seq)
		}
		*last = ev.Seq
		if err := fn(ev); err != nil {
			return delivered, err, nil
		}
		delivered++
	}
}

// idleCause replaces err by errIdle when the idle watchdog ended ctx.
func idleCause(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), errIdle) {
		return errIdle
	}
	return err
}

// idleReader re-arms the idle watchdog t whenever bytes arrive, heartbeats
// included.
type idleReader struct {
	r io.Reader
	t *time.Timer
	d time.Duration
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.t.Reset(r.d)
	}
	return n, err
}
