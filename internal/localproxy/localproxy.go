// Package localproxy is the LocalGatewayProxy: an HTTP server on 127.0.0.1
// that subprocess harnesses and MCP servers use as their Anthropic base URL
// (http://127.0.0.1:<port>/<conversationId>). It drops whatever credential the
// client sent, attaches a freshly minted WorkerToken for that conversation,
// and forwards to the control-plane gateway.
package localproxy

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/minting"
	"github.com/talkide/platform/internal/observe"
)

// Proxy is the LocalGatewayProxy handler.
type Proxy struct {
	rp     *httputil.ReverseProxy
	mcp    http.Handler
	logger *slog.Logger
	key    []byte       // derives the per-conversation capabilities; never leaves the process
	tracer trace.Tracer // nil: tracing off
	turn   func(conversationID string) trace.SpanContext
}

// capabilityPrefix marks a LocalGatewayProxy capability in logs and scans.
const capabilityPrefix = "tlp_"

// Capability is the credential a subprocess of conversation id presents to
// the proxy (as ANTHROPIC_AUTH_TOKEN or ANTHROPIC_API_KEY: either header is
// accepted). It is worthless outside this process and for any other
// conversation, so a process steered by one conversation cannot spend
// another's budget through the proxy.
func (p *Proxy) Capability(id string) string {
	m := hmac.New(sha256.New, p.key)
	m.Write([]byte(id))
	return capabilityPrefix + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// presented returns the credential a client sent, if any.
func presented(r *http.Request) string {
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return k
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if ok && strings.EqualFold(scheme, "Bearer") {
		return tok
	}
	return ""
}

// Options configure a Proxy; the zero value of each field means its default.
type Options struct {
	Logger *slog.Logger // nil: don't log
	// MCP, when set, serves /<conversationId>/mcp/... (the worker's own
	// MCP servers, docs/mcp.md) instead of forwarding it, once the
	// request has passed the proxy's checks: a valid conversation id, no
	// dot segments, a loopback host and the conversation's capability.
	// The handler sees the request as it came, path included.
	MCP http.Handler
	// TracerProvider, when set, makes a span of each forwarded call, and
	// the minting transport carries it to the gateway as traceparent;
	// nil: none.
	TracerProvider trace.TracerProvider
	// Turn, when set, names the span of the turn a conversation runs now
	// (invalid: none runs): a forwarded call's span is its child. What
	// the agent's processes send as traceparent is never the parent.
	Turn func(conversationID string) trace.SpanContext
}

// New returns a proxy forwarding to gatewayURL (the control-plane's
// …/api/internal/gateway/anthropic) with WorkerTokens from m. Both are
// required: New panics without them, a programmer error.
func New(gatewayURL *url.URL, m *minting.Minter, opts *Options) *Proxy {
	if gatewayURL == nil || m == nil {
		panic("localproxy: New needs a gateway URL and a Minter")
	}
	o := defaults.Copy(opts)
	defaults.Logger(&o.Logger)
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		panic("localproxy: crypto/rand failed: " + err.Error())
	}
	p := &Proxy{logger: o.Logger, key: key, mcp: o.MCP, tracer: observe.Tracer(o.TracerProvider, "localproxy"), turn: o.Turn}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The conversation id was validated and stripped in ServeHTTP;
			// it travels in the header only between here and the Transport.
			rest := pr.In.URL.Path
			pr.Out.URL.Scheme = gatewayURL.Scheme
			pr.Out.URL.Host = gatewayURL.Host
			pr.Out.URL.Path = strings.TrimRight(gatewayURL.Path, "/") + rest
			pr.Out.URL.RawPath = ""
			pr.Out.URL.RawQuery = ""
			pr.Out.Host = ""
		},
		Transport:     &minting.Transport{Minter: m},
		FlushInterval: -1,
		// ReverseProxy's own line (the gateway's answer broke off while
		// it was relayed; a client that left is not logged) goes to the
		// injected logger, never the process's standard one, as a warning
		// like the gateway's own line for a body that broke off.
		ErrorLog: slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.logger.Warn("local gateway proxy: upstream call failed",
				"conversation", r.Header.Get(minting.ConversationHeader), "err", err)
			status, typ := http.StatusBadGateway, "api_error"
			if errors.Is(err, minting.ErrMint) {
				status, typ = http.StatusUnauthorized, "authentication_error"
			}
			writeAnthropicError(w, status, typ, "talkide local gateway proxy: the control-plane gateway could not be reached or refused a token")
		},
	}
	return p
}

// ServeHTTP strips the leading /{conversationId} segment and forwards.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Split the escaped path: an id with an encoded "/" must fail validation,
	// not become two segments.
	seg, _, _ := strings.Cut(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	id, err := url.PathUnescape(seg)
	if err == nil {
		err = contract.ValidateConversationID(id)
	}
	if err != nil {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "talkide local gateway proxy: the path must start with a valid conversation id")
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, "/"+id)
	// A dot segment ("..", also percent-encoded) would carry the token out
	// of the gateway prefix to other control-plane paths.
	for _, s := range strings.Split(rest, "/") {
		if s == "." || s == ".." {
			writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "talkide local gateway proxy: the path must not contain . or .. segments")
			return
		}
	}
	if !httpapi.LoopbackHost(r.Host) {
		writeAnthropicError(w, http.StatusForbidden, "permission_error", "talkide local gateway proxy: only requests addressed to a loopback host are served")
		return
	}
	if subtle.ConstantTimeCompare([]byte(presented(r)), []byte(p.Capability(id))) != 1 {
		writeAnthropicError(w, http.StatusUnauthorized, "authentication_error", "talkide local gateway proxy: the credential is not this conversation's capability")
		return
	}
	if p.mcp != nil && (rest == "/mcp" || strings.HasPrefix(rest, "/mcp/")) {
		p.mcp.ServeHTTP(w, r)
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = rest
	r2.URL.RawPath = ""
	for k := range r2.Header {
		if strings.HasPrefix(strings.ToLower(k), "x-talkide-") {
			r2.Header.Del(k)
		}
	}
	r2.Header.Set(minting.ConversationHeader, id)
	// The agent's processes do not choose the trace their calls join.
	observe.Strip(r2.Header)
	if p.tracer != nil {
		ctx, span := p.startSpan(r, id, rest)
		defer span.End()
		r2 = r2.WithContext(ctx)
	}
	// By default the server reads what is left of a request's body, and
	// closes it, when the response's head goes out. Here the body is still
	// the Transport's to send: a gateway that answers before it has read
	// the last byte (a refusal, or a fast answer racing the Transport's
	// final read) would have that read fail, and the Transport then closes
	// the upstream connection under the response it is relaying.
	_ = http.NewResponseController(w).EnableFullDuplex()
	p.rp.ServeHTTP(w, r2)
}

func writeAnthropicError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"type":"error","error":{"type":%q,"message":%q}}`, typ, msg)
}

// Server is a running LocalGatewayProxy on a loopback port.
type Server struct {
	srv   *http.Server
	ln    net.Listener
	proxy *Proxy
}

// Listen starts p on 127.0.0.1 with a port chosen by the kernel.
func Listen(p *Proxy) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("localproxy: %w", err)
	}
	s := &Server{srv: &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}, ln: ln, proxy: p}
	go s.srv.Serve(ln)
	return s, nil
}

// ServeUnix serves the proxy on a unix socket at path as well: the way in
// for sandboxed processes in a network namespace of their own, whose
// supervisor relays 127.0.0.1:<the same port> to it. Shutdown closes it.
func (s *Server) ServeUnix(path string) error {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("localproxy: %w", err)
	}
	go s.srv.Serve(ln)
	return nil
}

// Port is the proxy's TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// URL is the proxy's base URL, http://127.0.0.1:<port>.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// BaseURLFor is the ANTHROPIC_BASE_URL a subprocess of conversation id uses.
func (s *Server) BaseURLFor(id string) string { return s.URL() + "/" + id }

// Capability is the credential a subprocess of conversation id presents.
func (s *Server) Capability(id string) string { return s.proxy.Capability(id) }

// Shutdown stops the server, waiting for calls in flight until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// startSpan starts the span of a call forwarded for conversation id: the
// child of the conversation's running turn, or a root of its own (linked
// to what the caller sent) when none runs.
func (p *Proxy) startSpan(r *http.Request, id, path string) (context.Context, trace.Span) {
	ctx := r.Context()
	// The path is the caller's: only so much of it is kept.
	if len(path) > 64 {
		path = path[:64]
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(observe.Conversation.String(id), attribute.String("url.path", path))}
	var turn trace.SpanContext
	if p.turn != nil {
		turn = p.turn(id)
	}
	if strings.HasPrefix(path, "/v1/messages") {
		// A model call (or its count_tokens): its usage is on the
		// gateway's span, the child of this one.
		opts = append(opts, trace.WithAttributes(observe.ChatOperation, observe.Anthropic[0], observe.Anthropic[1]))
	}
	if turn.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, turn)
	} else {
		opts = append(opts, observe.Untrusted(r.Header)...)
	}
	return p.tracer.Start(ctx, "localproxy "+r.Method+" "+path, opts...)
}
