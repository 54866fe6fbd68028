package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/observe"
	"github.com/talkide/platform/internal/store"
)

// checkTimeout bounds the store call that extends a reservation mid-stream.
const checkTimeout = 5 * time.Second

// call is the state of one forwarded request. ServeHTTP creates it and the
// proxy's hooks fill it in; all of them run on the handler's goroutine, so
// no field needs a lock.
type call struct {
	g        *Gateway
	span     trace.Span      // the call's; records nothing while tracing is off
	ctx      context.Context // the inbound request's; used only for its values
	path     string          // upstream path, e.g. /v1/messages
	reqModel string          // the model the request names, or ""
	body     *heldBody       // the request body, until the upstream has it
	rec      store.UsageRecord

	hold      *budget.Hold       // nil: budgets off, or not a metered path
	out       context.Context    // the upstream call's
	cancelOut context.CancelFunc // ends the upstream call
	cut       *budget.Denial     // why a hard limit cut the stream; nil: it did not

	meter  *meter    // set by modifyResponse; nil when no response came
	err    error     // set by proxyError: why no response came
	respAt time.Time // when the upstream's response came; set with metrics only

	once sync.Once
}

// checkBudget is the meter's hard-stop check of a stream's running usage.
func (c *call) checkBudget(running usage) bool {
	u := running.budget()
	if u.Model == "" {
		u.Model = c.reqModel
	}
	if c.hold.Covers(u) {
		// Nearly every event: no store call, so no deadline (a context
		// and a timer per event) is set up for one.
		return true
	}
	ctx, cancel := context.WithTimeout(c.out, checkTimeout)
	defer cancel()
	err := c.hold.Check(ctx, u)
	if d, ok := errors.AsType[*budget.Denial](err); ok {
		c.cut = d
		if c.g.metrics != nil {
			c.g.metrics.BudgetDenied(c.rec.Tenant, c.rec.Env, d)
		}
		return false
	}
	return true
}

// cutEvent is the event that ends a stream a hard limit cut off: an
// Anthropic error event, which the SDKs raise as an error, with the
// denial's details as in a 429's body.
func (c *call) cutEvent() []byte {
	b, err := json.Marshal(anthropicError{Type: "error", Error: anthropicErrorBody{
		Type: errRateLimit, Message: c.cut.Error(), Budget: budgetDetails(c.cut),
	}})
	if err != nil {
		panic("gateway: marshal error event: " + err.Error())
	}
	return append(append([]byte("event: error\ndata: "), b...), "\n\n"...)
}

// finish records the call, once, with the usage seen so far, and settles
// its reservation. Neither store write happens on the call's path: the
// recorder and the hold write in the background. It runs when the proxy is done with the request: after
// the body reached EOF, after the client went away mid-body (and the rest
// was drained), or after the upstream could not be reached.
func (c *call) finish() {
	c.once.Do(func() {
		c.cancelOut()
		rec := c.rec
		rec.Duration = c.g.now().Sub(rec.StartedAt)
		var (
			charged   usage
			estimated bool
		)
		if c.meter != nil {
			u := c.meter.usage()
			rec.Streamed = c.meter.streamed
			rec.Model = u.Model
			rec.InputTokens = u.InputTokens
			rec.OutputTokens = u.OutputTokens
			rec.CacheCreationInputTokens = u.CacheCreationInputTokens
			rec.CacheReadInputTokens = u.CacheReadInputTokens
			charged, estimated = c.meter.charged()
		}
		if rec.Model == "" {
			rec.Model = c.reqModel
		}
		charged.Model = rec.Model
		if c.meter != nil {
			c.g.observe(rec.Tenant, rec.Env, rec.Model, rec.Status, true)
		} else {
			c.g.observe(rec.Tenant, rec.Env, rec.Model, http.StatusBadGateway, false) // proxyError's answer
		}
		if c.span.IsRecording() {
			c.recordSpan(rec)
		}
		if c.hold != nil {
			// The hold writes in the background; until it has, the
			// reservation keeps holding the call's money.
			c.hold.Settle(budget.Settlement{Usage: charged.budget(), Status: rec.Status,
				Streamed: rec.Streamed, Estimated: estimated})
		}

		// The log line is formatted by the recorder, in the background,
		// from these fields (logLine), once the record is written.
		p := pending{ctx: context.WithoutCancel(c.ctx), rec: rec, path: c.path}
		if c.hold != nil {
			p.held, p.reserved, p.estimated = true, c.hold.Reserved(), estimated
			if c.cut != nil {
				p.cut = c.cut.Error()
			}
		}
		if c.err != nil {
			p.err = c.err.Error()
		}
		// Written in the background (recorder.go), and logged once written.
		// A client that went away is still recorded: its context is kept
		// for the log line's values only.
		c.g.rec.add(p)
	})
}

// recordSpan puts what the call measured on its span: the GenAI
// attributes of the usage the gateway metered, the status, a hard limit's
// cut. Never a header, a body or a token.
func (c *call) recordSpan(rec store.UsageRecord) {
	m := observe.ModelCall{RequestModel: c.reqModel, ResponseModel: rec.Model,
		Input: rec.InputTokens, Output: rec.OutputTokens,
		CacheRead: rec.CacheReadInputTokens, CacheCreation: rec.CacheCreationInputTokens}
	c.span.SetAttributes(m.SpanAttributes()...)
	c.span.SetAttributes(observe.ChatOperation, observe.Anthropic[0], observe.Anthropic[1],
		observe.GenAIRequestModel.String(c.reqModel), attribute.Int("http.response.status_code", rec.Status))
	switch {
	case c.cut != nil:
		budgetSpan(c.span, "cut", c.cut)
		c.span.SetStatus(codes.Error, "budget_cut")
	case c.err != nil:
		c.span.SetStatus(codes.Error, "upstream_unreachable")
	case rec.Status >= 500:
		c.span.SetStatus(codes.Error, "upstream_"+strconv.Itoa(rec.Status))
	}
}
