package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/talkide/platform/internal/store"
)

// recordTimeout bounds the store write that records a call.
const recordTimeout = 10 * time.Second

// call is the state of one forwarded request. ServeHTTP creates it and the
// proxy's hooks fill it in; all of them run on the handler's goroutine, so
// no field needs a lock.
type call struct {
	g        *Gateway
	ctx      context.Context // the inbound request's; used only for its values
	path     string          // upstream path, e.g. /v1/messages
	reqModel string          // the model the request names, or ""
	rec      store.UsageRecord

	meter *meter // set by modifyResponse; nil when no response came
	err   error  // set by proxyError: why no response came

	once sync.Once
}

// finish records the call, once, with the usage seen so far. It runs when
// the proxy is done with the request: after the body reached EOF, after the
// client went away mid-body, or after the upstream could not be reached.
func (c *call) finish() {
	c.once.Do(func() {
		rec := c.rec
		rec.Duration = c.g.now().Sub(rec.StartedAt)
		if c.meter != nil {
			u := c.meter.usage()
			rec.Streamed = c.meter.streamed
			rec.Model = u.Model
			rec.InputTokens = u.InputTokens
			rec.OutputTokens = u.OutputTokens
			rec.CacheCreationInputTokens = u.CacheCreationInputTokens
			rec.CacheReadInputTokens = u.CacheReadInputTokens
		}
		if rec.Model == "" {
			rec.Model = c.reqModel
		}

		// A client that went away is still charged: not its context.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), recordTimeout)
		defer cancel()
		attrs := []any{
			"id", rec.ID,
			"tenant", rec.Tenant,
			"env", rec.Env,
			"conversation", rec.ConversationID,
			"user", rec.UserID,
			"path", c.path,
			"model", rec.Model,
			"status", rec.Status,
			"streamed", rec.Streamed,
			"input_tokens", rec.InputTokens,
			"output_tokens", rec.OutputTokens,
			"cache_creation_input_tokens", rec.CacheCreationInputTokens,
			"cache_read_input_tokens", rec.CacheReadInputTokens,
			"duration", rec.Duration,
		}
		if c.err != nil {
			attrs = append(attrs, "err", c.err.Error())
		}
		if err := c.g.store.RecordUsage(ctx, rec); err != nil {
			c.g.log.ErrorContext(ctx, "gateway: record usage", append(attrs, "record_err", err.Error())...)
			return
		}
		c.g.log.InfoContext(ctx, "gateway: call", attrs...)
	})
}
