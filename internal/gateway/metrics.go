package gateway

import (
	"net/http"
	"sync"
	"time"

	"github.com/talkide/platform/internal/budget"
)

// Metrics observes the gateway's work for monitoring; internal/metrics
// implements it with Prometheus. Its methods are called concurrently from
// the goroutines serving requests and must not block. Nothing passed to it
// names a user, a conversation or a credential.
type Metrics interface {
	// Request is called once for every request the gateway answers,
	// forwarded or refused.
	Request(RequestInfo)
	// ForwardLatency is the gateway's overhead before the upstream: from
	// the handler being called (the request's headers read) to the request
	// being handed to the upstream transport. It includes reading the
	// body, the token check, the conversation lookup and the budget
	// reservation.
	ForwardLatency(time.Duration)
	// FirstByteLatency is the gateway's overhead on the way back: from the
	// upstream's response (its status and headers) reaching the gateway to
	// the response's first bytes being flushed to the client. The model's
	// own latency is in neither.
	FirstByteLatency(time.Duration)
	// BudgetDenied is called for a call a budget limit refused: at
	// admission (answered 429), or mid-stream (d.MidStream: a hard limit
	// cut the stream).
	BudgetDenied(tenant, env string, d *budget.Denial)
}

// RequestInfo is one request the gateway answered.
type RequestInfo struct {
	// Tenant and Env are those of the conversation the gateway resolved
	// from the store for the call, so only a provisioned tenant-env is
	// named; both are empty for a request refused before that (no or an
	// invalid token, a conversation that does not exist or is not the
	// token's), whatever its token claims.
	Tenant, Env string
	Model       string // as the response (else the request) names it; empty when unknown
	// Status is what the client was sent: the upstream's status, or the
	// gateway's own (a refusal, 502 when the upstream was not reached).
	Status   int
	Upstream bool // Status is the upstream's
}

// observe reports a request to the metrics, if any.
func (g *Gateway) observe(tenant, env, model string, status int, upstream bool) {
	if g.metrics != nil {
		g.metrics.Request(RequestInfo{Tenant: tenant, Env: env, Model: model, Status: status, Upstream: upstream})
	}
}

// firstByteWriter notes when a forwarded response is first flushed to the
// client. ReverseProxy flushes through http.ResponseController, which finds
// FlushError; everything else reaches the underlying writer via Unwrap.
type firstByteWriter struct {
	http.ResponseWriter
	c    *call
	once sync.Once
}

func (w *firstByteWriter) FlushError() error {
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if err == nil && !w.c.respAt.IsZero() {
		w.once.Do(func() { w.c.g.metrics.FirstByteLatency(w.c.g.now().Sub(w.c.respAt)) })
	}
	return err
}

func (w *firstByteWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
