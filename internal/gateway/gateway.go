// Package gateway is the gateway-proxy: the only holder of ANTHROPIC_API_KEY.
// It forwards a worker's model calls to Anthropic, authorised by a WorkerToken
// for one conversation, and records the tokens each call used.
package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/bodyroom"
	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/observe"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/trust"
)

// Prefix is where the control-plane mounts the gateway. The handler receives
// the full path and strips Prefix itself.
const Prefix = contract.GatewayPrefix

// Header names read by the gateway. Both are removed before forwarding.
const (
	// ConversationHeader names the conversation a call belongs to. When it
	// is absent the WorkerToken's conversation is used.
	ConversationHeader = contract.ConversationHeader
	// TokenHeader carries the WorkerToken; "Authorization: Bearer <token>"
	// is accepted too (what the official SDKs send for an auth token).
	TokenHeader = contract.TokenHeader
)

// DefaultMaxBody is the default cap on a request body.
const DefaultMaxBody = 32 << 20

// anthropicVersion is sent upstream when the client names none.
const anthropicVersion = "2023-06-01"

// forwarded are the upstream paths the gateway serves, below Prefix.
var forwarded = map[string]bool{
	"/v1/messages":              true,
	"/v1/messages/count_tokens": true,
}

// Store is the part of the control-plane store the gateway needs. Its
// methods are called concurrently; GetConversation returns an error wrapping
// store.ErrNotFound for an unknown conversation. RecordUsages stores a
// batch of usage records in one transaction and ignores a record whose ID
// is stored already (store.Store's semantics).
type Store interface {
	GetConversation(ctx context.Context, id string) (store.Conversation, error)
	RecordUsages(ctx context.Context, us []store.UsageRecord) error
}

// Budget admits model calls before they go upstream and charges them when
// they are done; *budget.Service implements it. Reserve admits a
// /v1/messages call against every limit and holds its estimated cost;
// Admit admits a free count_tokens call against the requests-per-minute
// limits only, and counts it there. Both return a *budget.Denial for a
// call a limit refuses, and any other error when the budget cannot be
// checked. They are called concurrently.
type Budget interface {
	Reserve(ctx context.Context, c budget.Call) (*budget.Hold, error)
	Admit(ctx context.Context, c budget.Call) error
}

// Refuser is what a Budget may also implement (*budget.Service does): a
// check on the headers, before the body is read, that returns the denial
// of a call that a limit with nothing left refuses whatever its body
// says, or nil when none is known. free is true for a call that costs
// nothing (count_tokens). It must not block.
type Refuser interface {
	Refused(c budget.Call, free bool) *budget.Denial
}

// DefaultDrainTimeout is how long the gateway goes on reading a response
// after its client went away, by default.
const DefaultDrainTimeout = 30 * time.Second

// Options configures a Gateway. The zero value is usable.
type Options struct {
	Logger    *slog.Logger      // nil: don't log
	Now       func() time.Time  // nil: time.Now
	Transport http.RoundTripper // nil: an http.Transport for the one upstream (newTransport)
	MaxBody   int64             // request body cap; 0: DefaultMaxBody
	// Budget, when set, admits each /v1/messages call before it is
	// forwarded (a denial is a 429) and settles it when it is done. Nil:
	// no budgets, every call is forwarded.
	Budget Budget
	// DrainTimeout bounds how long the gateway keeps reading a response
	// whose client went away, so that the call is charged what the upstream
	// produced (docs/budgets.md); then it cancels the upstream call. 0:
	// DefaultDrainTimeout; negative: cancel at once.
	DrainTimeout time.Duration
	// ConversationTTL is how long a conversation looked up in the store is
	// remembered (convcache.go): its later calls within that time do not
	// wait for the store. 0: DefaultConversationTTL; negative: look it up
	// on every call.
	ConversationTTL time.Duration
	// Metrics, when set, observes every request: its status, the gateway's
	// own latency, budget denials. Nil: no metrics.
	Metrics Metrics
	// BodyTimeout bounds how long a client may take to send a request's
	// body, from the request's start (httpapi.BodyDeadline; a handler
	// that wraps the gateway in one already keeps its own); the response
	// that follows is not bounded. 0: httpapi.DefaultBodyTimeout.
	BodyTimeout time.Duration
	// MaxBuffered bounds the bytes of request bodies held in memory at
	// once, across all requests (bodies.go): a request that finds no room
	// for its body is refused before it is read, 503 with Retry-After.
	// 0: DefaultMaxBuffered; negative: no bound.
	MaxBuffered int64
	// TracerProvider, when set, makes a span of each call whose
	// WorkerToken verified, continuing the worker's trace, with the budget
	// decision and the call's usage (docs/observability.md); nil: none,
	// at no cost.
	TracerProvider trace.TracerProvider
}

// Gateway is an http.Handler that forwards model calls upstream. It is safe
// for concurrent use. It writes usage records in the background (see
// Flush and Close).
type Gateway struct {
	upstream *url.URL
	apiKey   string
	keys     *trust.Keyring
	store    Store
	log      *slog.Logger // never nil
	now      func() time.Time
	maxBody  int64
	budget   Budget // nil: budgets off
	drain    time.Duration
	convs    *convCache   // nil: no cache
	tokens   *tokenCache  // WorkerTokens that verified (tokencache.go)
	metrics  Metrics      // nil: no metrics
	tracer   trace.Tracer // nil: tracing off
	rec      *recorder
	bodies   *bodyroom.Room      // nil: no bound
	urls     map[string]*url.URL // the upstream URL of each forwarded path
	proxy    *httputil.ReverseProxy
	own      *http.Transport // the default transport, when Options.Transport was nil
	handler  http.Handler    // serve, with the body's deadline
}

// New returns the gateway. upstream is the Anthropic API base URL (e.g.
// https://api.anthropic.com, or the simulator's URL); apiKey is
// ANTHROPIC_API_KEY. It panics if a required argument is missing.
func New(upstream *url.URL, apiKey string, keys *trust.Keyring, st Store, opts *Options) *Gateway {
	switch {
	case upstream == nil || upstream.Scheme == "" || upstream.Host == "":
		panic("gateway: upstream must be an absolute URL")
	case apiKey == "":
		panic("gateway: empty API key")
	case keys == nil:
		panic("gateway: nil keyring")
	case st == nil:
		panic("gateway: nil store")
	}
	o := defaults.Copy(opts)
	defaults.Logger(&o.Logger)
	defaults.Clock(&o.Now)
	var own *http.Transport
	if o.Transport == nil {
		own = newTransport()
		o.Transport = own
	}
	defaults.IfNotPositive(&o.MaxBody, DefaultMaxBody)
	defaults.IfZero(&o.DrainTimeout, DefaultDrainTimeout)
	defaults.IfZero(&o.ConversationTTL, DefaultConversationTTL)
	defaults.IfZero(&o.MaxBuffered, DefaultMaxBuffered)
	if o.MaxBuffered > 0 && o.MaxBody > o.MaxBuffered {
		// A body the bound could never hold is too large, not a retry.
		o.MaxBody = o.MaxBuffered
	}
	u := *upstream
	g := &Gateway{
		upstream: &u,
		apiKey:   apiKey,
		keys:     keys,
		store:    st,
		log:      o.Logger,
		now:      o.Now,
		maxBody:  o.MaxBody,
		budget:   o.Budget,
		drain:    max(o.DrainTimeout, 0),
		convs:    newConvCache(o.ConversationTTL),
		tokens:   newTokenCache(),
		metrics:  o.Metrics,
		tracer:   observe.Tracer(o.TracerProvider, "gateway"),
		rec:      newRecorder(st, o.Logger),
		bodies:   bodyroom.New(o.MaxBuffered, 0),
		own:      own,
	}
	g.urls = upstreamURLs(&u)
	g.proxy = &httputil.ReverseProxy{
		Rewrite:        g.rewrite,
		Transport:      o.Transport,
		FlushInterval:  -1, // every read of the upstream reaches the client at once, streamed or not
		ModifyResponse: g.modifyResponse,
		ErrorHandler:   g.proxyError,
		BufferPool:     copyBuffers,
		// Its own lines: an upstream body that failed mid-copy.
		ErrorLog: slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
	g.handler = httpapi.BodyDeadline(o.BodyTimeout, http.HandlerFunc(g.serve))
	return g
}

// Flush waits until the usage records of the calls that ended before it
// was called are written (or, after a minute of failing writes, logged as
// lost), or until ctx ends.
func (g *Gateway) Flush(ctx context.Context) error { return g.rec.flush(ctx) }

// Close waits, until ctx ends, for the usage records not yet written; when
// ctx ends first the rest are logged as lost. Close does not stop the
// gateway from serving: a call that ends after Close writes its record
// itself before its response ends, as a store write on the call's path.
// Call it after the HTTP server has shut down and before the store closes.
// It closes the default transport's idle connections to the upstream,
// and with them the two goroutines http.Transport keeps for each. A
// gateway that is never closed holds those until the connections have
// been idle for 90 s.
func (g *Gateway) Close(ctx context.Context) error {
	if g.own != nil {
		g.own.CloseIdleConnections()
	}
	return g.rec.close(ctx)
}

// ServeHTTP authorises, forwards and meters one model call.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.handler.ServeHTTP(w, r) }

func (g *Gateway) serve(w http.ResponseWriter, r *http.Request) {
	start := g.now()
	if !httpapi.CanonicalPath(r.URL.EscapedPath()) {
		// Not a 404 (nor the redirect a ServeMux would answer): a client
		// that sent ".." or "//" meant some other path, and is told so.
		g.deny(w, r, nil, &httpError{Status: http.StatusBadRequest, Type: errInvalidRequest,
			Msg: "the request path is not canonical: it has an empty, '.' or '..' segment"})
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if !ok || !forwarded[rest] {
		g.deny(w, r, nil, &httpError{Status: http.StatusNotFound, Type: errNotFound, Msg: "no such endpoint"})
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		g.deny(w, r, nil, &httpError{Status: http.StatusMethodNotAllowed, Type: errInvalidRequest, Msg: "method not allowed"})
		return
	}
	conv, herr := g.authorize(r)
	if herr != nil {
		g.deny(w, r, conv, herr)
		return
	}
	if rc := callConn(r.Context()); rc != nil && !rc.raw.Load() {
		// A worker's connection, raw from now on until it closes: its
		// next request's head and this response's end are reads and
		// writes of the stream too.
		rc.raw.Store(true)
	}
	span := noSpan
	if g.tracer != nil {
		// The WorkerToken verified: the worker's trace goes on here.
		var ctx context.Context
		ctx, span = g.tracer.Start(observe.Continue(r.Context(), r.Header), "gateway POST "+rest,
			trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(observe.Tenant.String(conv.Tenant),
				observe.Env.String(conv.Env), observe.Conversation.String(conv.ID)))
		if p := purposeOf(r.Context()); p != "" {
			// The control-plane's own call (a title), not the agent's.
			span.SetAttributes(attribute.String("talkide.purpose", p))
		}
		defer span.End()
		r = r.WithContext(ctx)
	}
	if rf, ok := g.budget.(Refuser); ok {
		// A limit with nothing left refuses this call whatever its body
		// says: refused before the body is read.
		who := budget.Call{Tenant: conv.Tenant, Env: conv.Env, User: conv.UserID, Conversation: conv.ID, StartedAt: start}
		if d := rf.Refused(who, rest != "/v1/messages"); d != nil {
			budgetSpan(span, "refused", d)
			w.Header().Set("Connection", "close") // the body is not read
			if g.metrics != nil {
				g.metrics.BudgetDenied(conv.Tenant, conv.Env, d)
			}
			g.denyCall(w, r, conv, "", budgetError(w.Header(), d))
			return
		}
	}
	held, herr := g.readBody(w, r)
	if herr != nil {
		g.denyCall(w, r, conv, "", herr)
		return
	}
	// Given back when the upstream has the body (modifyResponse,
	// proxyError), at the latest when the call is done.
	defer held.release()
	body := held.b

	req := scanRequest(body)
	model, maxTokens := req.model, req.maxTokens
	if req.repeated != "" {
		g.denyCall(w, r, conv, "", &httpError{Status: http.StatusBadRequest, Type: errInvalidRequest,
			Msg: "the request body has the key \"" + req.repeated + "\" more than once"})
		return
	}
	if model != "" {
		if err := contract.ValidateModel("model", model); err != nil {
			g.denyCall(w, r, conv, "", &httpError{Status: http.StatusBadRequest, Type: errInvalidRequest, Msg: err.Error()})
			return
		}
	}
	c := &call{
		g:    g,
		span: span,
		ctx:  r.Context(),
		path: rest,
		rec: store.UsageRecord{
			ID:             contract.NewOrderedID("gw_", start),
			Tenant:         conv.Tenant,
			Env:            conv.Env,
			ConversationID: conv.ID,
			UserID:         conv.UserID,
			StartedAt:      start,
			Purpose:        purposeOf(r.Context()),
		},
		reqModel: model,
		body:     held,
	}
	if g.budget != nil {
		bc := budget.Call{
			ID: c.rec.ID, Tenant: conv.Tenant, Env: conv.Env, User: conv.UserID,
			Conversation: conv.ID, Model: model, RequestBytes: promptBytes(body), MaxTokens: maxTokens,
			StartedAt: start,
		}
		var hold *budget.Hold
		var err error
		_, bspan := observe.Start(r.Context(), g.tracer, "budget admission")
		if rest == "/v1/messages" {
			hold, err = g.budget.Reserve(r.Context(), bc)
		} else {
			// count_tokens is free, but a request: requests-per-minute
			// limits count it.
			err = g.budget.Admit(r.Context(), bc)
		}
		if g.tracer != nil {
			d, _ := errors.AsType[*budget.Denial](err)
			decision, errType := "admitted", "budget_error"
			if d != nil {
				decision, errType = "denied", "budget_denied"
			}
			budgetSpan(bspan, decision, d)
			observe.End(bspan, err, errType)
		}
		if d, ok := errors.AsType[*budget.Denial](err); ok {
			if g.metrics != nil {
				g.metrics.BudgetDenied(conv.Tenant, conv.Env, d)
			}
			g.denyCall(w, r, conv, model, budgetError(w.Header(), d))
			return
		}
		if err != nil {
			g.denyCall(w, r, conv, model, &httpError{Status: http.StatusInternalServerError, Type: errAPI,
				Msg: "internal error: the budget could not be checked", Err: err})
			return
		}
		c.hold = hold
	}

	// The upstream call does not end when the client goes away: it goes on
	// for up to the drain timeout, so that the call is charged what the
	// upstream produced. Then, or when the call is done, it is cancelled.
	out, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	c.out, c.cancelOut = out, cancel
	stop := context.AfterFunc(r.Context(), func() {
		t := time.NewTimer(g.drain)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-out.Done():
		}
	})
	defer stop()
	// Every path out of the proxy, including the panic with which it aborts
	// a response whose copy failed, records the call exactly once.
	defer c.finish()

	// ReverseProxy sends the held body, not the read one, on the
	// upstream call's context, which carries c to its hooks.
	in := r.WithContext(context.WithValue(out, callKey{}, c))
	in.Body = held.reader()
	in.GetBody = held.getBody
	in.ContentLength = int64(len(body))
	in.TransferEncoding = nil
	// No protocol switch goes through the gateway: without an Upgrade
	// header ReverseProxy neither asks the upstream for one nor refuses
	// the call for an unprintable one.
	delete(in.Header, "Upgrade")
	if g.metrics != nil {
		w = &firstByteWriter{ResponseWriter: w, c: c}
	}
	g.proxy.ServeHTTP(w, in)
}

// purposeKey carries a call's purpose (WithPurpose).
type purposeKey struct{}

// WithPurpose returns a context whose call through the gateway is recorded
// with purpose p (store.UsageRecord.Purpose). Only a caller in the same
// process sets it, on a request it hands to ServeHTTP itself (the
// control-plane's title call): nothing a worker sends can.
func WithPurpose(ctx context.Context, p string) context.Context {
	return context.WithValue(ctx, purposeKey{}, p)
}

func purposeOf(ctx context.Context) string {
	p, _ := ctx.Value(purposeKey{}).(string)
	return p
}

// callKey carries a call to the proxy's hooks, in the upstream request's
// context.
type callKey struct{}

func callOf(r *http.Request) *call { return r.Context().Value(callKey{}).(*call) }

// deniedHeaders are removed from every forwarded request (in canonical
// form; a key that is not canonical is compared case-insensitively, see
// denied). Any header starting with "X-Talkide-" goes too.
var deniedHeaders = map[string]bool{
	"Authorization":       true,
	"Proxy-Authorization": true,
	"X-Api-Key":           true,
	"X-Worker-Token":      true,
	"Cookie":              true,
	// The gateway reads the response, so it asks for no encoding it would
	// have to undo (the default Transport asks for none either).
	"Accept-Encoding": true,
	// No protocol switches through the gateway.
	"Upgrade":    true,
	"Connection": true,
	// The platform's traces end here: the upstream is outside.
	"Traceparent": true,
	"Tracestate":  true,
	"Baggage":     true,
}

// talkidePrefix starts the names of our own identity headers.
const talkidePrefix = "X-Talkide-"

// denied says whether the header k is removed before forwarding. The
// server hands the gateway canonical keys, which are looked up as they
// are (lower-casing every key cost an allocation per header per call); a
// key set in another case is canonicalised first.
func denied(k string) bool {
	if deniedHeaders[k] || len(k) >= len(talkidePrefix) && strings.EqualFold(k[:len(talkidePrefix)], talkidePrefix) {
		return true
	}
	if c := http.CanonicalHeaderKey(k); c != k {
		return deniedHeaders[c]
	}
	return false
}

// upstreamURLs holds the upstream URL of each forwarded path, made once.
func upstreamURLs(upstream *url.URL) map[string]*url.URL {
	m := make(map[string]*url.URL, len(forwarded))
	for p := range forwarded {
		m[p] = &url.URL{Scheme: upstream.Scheme, Host: upstream.Host, Path: strings.TrimSuffix(upstream.Path, "/") + p}
	}
	return m
}

// rewrite turns the inbound request into the upstream one. ReverseProxy
// has already removed the hop-by-hop headers, those the Connection header
// names and the X-Forwarded-* and Forwarded ones, kept "TE: trailers",
// and sends no User-Agent of Go's own when the client sent none.
func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	c := callOf(pr.In)
	out := pr.Out
	// A copy: the inbound target's query, user info or host (an
	// absolute-form target) go nowhere.
	u := *g.urls[c.path]
	out.URL = &u
	out.Host = ""
	for k := range out.Header {
		if denied(k) {
			delete(out.Header, k)
		}
	}
	out.Header["X-Api-Key"] = []string{g.apiKey}
	if out.Header.Get("Anthropic-Version") == "" {
		out.Header["Anthropic-Version"] = []string{anthropicVersion}
	}
	if g.metrics != nil {
		// ReverseProxy hands the request to the transport right after this.
		g.metrics.ForwardLatency(g.now().Sub(c.rec.StartedAt))
	}
}

// errSwitched refuses a 101: no protocol switch passes the gateway.
var errSwitched = errors.New("gateway: the upstream switched protocols")

// modifyResponse starts metering the response body as it passes.
func (g *Gateway) modifyResponse(res *http.Response) error {
	c := callOf(res.Request)
	if res.StatusCode == http.StatusSwitchingProtocols {
		return errSwitched // to proxyError, which answers 502
	}
	c.body.release() // the upstream has read it
	if g.metrics != nil {
		c.respAt = g.now()
	}
	c.rec.Status = res.StatusCode
	c.meter = newMeter(res.Header)
	body := &meteredBody{ReadCloser: res.Body, m: c.meter, drain: g.drain > 0}
	body.timer = func() func() {
		t := time.AfterFunc(g.drain, c.cancelOut)
		return func() { t.Stop() }
	}
	if c.hold != nil && c.hold.Hard() && c.meter.streamed && res.StatusCode == http.StatusOK {
		c.meter.sse.check = c.checkBudget
		body.tail = c.cutEvent
	}
	res.Body = body
	return nil
}

// proxyError handles a call that got no upstream response: the upstream
// could not be reached, answered 101, or the client went away first.
func (g *Gateway) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	c := callOf(r)
	c.body.release()
	c.err = err
	writeError(w, http.StatusBadGateway, errAPI, "upstream unavailable")
}

// noSpan records nothing: a call's span while tracing is off.
var noSpan = trace.SpanFromContext(context.Background())

// budgetSpan records a budget decision on span: admitted, or refused by
// which kind of limit of which scope (never the subject's id).
func budgetSpan(span trace.Span, decision string, d *budget.Denial) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("talkide.budget.decision", decision))
	if d != nil {
		span.SetAttributes(attribute.String("talkide.budget.scope", string(d.Limit.Subject.Scope)), attribute.String("talkide.budget.kind", string(d.Limit.Kind)))
	}
}
