// Package egress is the HTTP forward proxy through which a sandboxed agent
// process reaches the network: CONNECT tunnels and plain-HTTP requests, each
// authenticated as one conversation, to the destinations on the
// deployment's allow-list only, and never to a loopback, private or
// link-local address unless the list's entry says so.
//
// The worker starts one Server and gives each sandbox the proxy URL of its
// conversation, which carries the conversation's capability:
//
//	allow, err := egress.LoadAllowList(path) // the operator's file
//	if err != nil {
//		return err
//	}
//	proxy := egress.New(allow, localProxy.Capability, &egress.Options{Logger: logger})
//	if err := proxy.Listen("127.0.0.1:0"); err != nil {
//		return err
//	}
//	defer proxy.Shutdown(ctx)
//	cmd.Env = append(cmd.Env, proxy.Env(conversationID)...) // HTTPS_PROXY=http://<id>:<capability>@127.0.0.1:<port>, …
//
// A sandbox without a network of its own reaches the proxy over a unix
// socket instead: Serve(ln) takes a unix listener as well as a TCP one, and
// URLForAddr names the TCP address the sandbox's processes dial (a relay
// inside the sandbox that forwards to the socket):
//
//	ln, err := net.Listen("unix", socketPath)
//	…
//	go proxy.Serve(ln)
//	cmd.Env = append(cmd.Env, egress.ProxyEnv(proxy.URLForAddr(conversationID, "127.0.0.1:3128"))...)
//
// Passing the LocalGatewayProxy's Capability makes one credential serve
// both proxies; any function that derives a secret per conversation under a
// key the sandbox cannot read will do. See docs/egress.md.
package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/talkide/platform/internal/defaults"
)

// ErrServerClosed is returned by Listen and Serve after Shutdown.
var ErrServerClosed = errors.New("egress: server closed")

// Options configure a Server; the zero value of each field means its
// default.
type Options struct {
	Logger *slog.Logger // nil: don't log

	// Resolver looks up destination names (default net.DefaultResolver).
	Resolver Resolver
	// Dialer is the template of every upstream connection (default a zero
	// net.Dialer). The proxy sets its own address check as ControlContext;
	// a Control or ControlContext of the template runs after that check.
	Dialer *net.Dialer

	// ConnectTimeout bounds resolving a destination and connecting to it
	// (default 10 s).
	ConnectTimeout time.Duration
	// IdleTimeout closes a tunnel, or a plain-HTTP exchange, in which no
	// byte has moved in either direction for this long, so a stalled or
	// deliberately slow client cannot hold a connection (default 2 min).
	IdleTimeout time.Duration
	// MaxTunnelsPerConversation bounds the connections one conversation has
	// open through the proxy: CONNECT tunnels and plain-HTTP requests being
	// forwarded (default 32). One more is 429 with Retry-After.
	MaxTunnelsPerConversation int
	// MaxTunnels bounds them over all conversations (default 512). One
	// more is 503 with Retry-After.
	MaxTunnels int
	// MaxHeaderBytes bounds a request's header (default 32 KiB); a larger
	// one is 431.
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds reading a request's header (default 10 s).
	ReadHeaderTimeout time.Duration

	// LogInterval and LogBurst rate-limit the warnings about refused
	// requests: at most LogBurst lines per conversation per LogInterval
	// (default 10 per minute); the next line after a pause says how many
	// were suppressed.
	LogInterval time.Duration
	LogBurst    int

	// AllowListName is how a refusal tells the client which list to extend
	// (default "the deployment's egress allow-list").
	AllowListName string

	// Now is the clock of the log rate limit (default time.Now).
	Now func() time.Time
}

func (o *Options) setDefaults() {
	defaults.Logger(&o.Logger)
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	if o.Dialer == nil {
		o.Dialer = &net.Dialer{}
	}
	defaults.IfNotPositive(&o.ConnectTimeout, 10*time.Second)
	defaults.IfNotPositive(&o.IdleTimeout, 2*time.Minute)
	defaults.IfNotPositive(&o.MaxTunnelsPerConversation, 32)
	defaults.IfNotPositive(&o.MaxTunnels, 512)
	defaults.IfNotPositive(&o.MaxHeaderBytes, 32<<10)
	defaults.IfNotPositive(&o.ReadHeaderTimeout, 10*time.Second)
	defaults.IfNotPositive(&o.LogInterval, time.Minute)
	defaults.IfNotPositive(&o.LogBurst, 10)
	if o.AllowListName == "" {
		o.AllowListName = "the deployment's egress allow-list"
	}
	defaults.Clock(&o.Now)
}

// Server is the egress proxy. Its ServeHTTP may also be mounted on a
// server of the caller's; Listen, Serve and Shutdown run its own.
type Server struct {
	allow      *AllowList
	capability func(conversationID string) string
	opts       Options
	logger     *slog.Logger
	dialer     *dialer
	slots      *slots
	logLimit   *logLimiter
	srv        *http.Server
	forwarder  *httputil.ReverseProxy
	stats      counters

	mu      sync.Mutex
	closing bool                 // guarded by mu: Shutdown has begun
	addr    net.Addr             // guarded by mu: the first listener's address
	tcpAddr *net.TCPAddr         // guarded by mu: the first TCP listener's address, for URLFor
	tunnels map[*tunnel]struct{} // guarded by mu: the open CONNECT tunnels

	// tunnelsWG counts the open tunnels; Add only under mu and before
	// closing, so that Shutdown's Wait, after closing is set, sees them all.
	tunnelsWG sync.WaitGroup
	// serveWG counts the Serve loops Listen started, likewise.
	serveWG sync.WaitGroup
}

// New returns an egress proxy for the destinations allow allows. capability
// derives the credential of a conversation, which its requests present as
// the password of the proxy URL (see URLFor); it must be a secret of the
// worker process, never "" for a conversation that may use the proxy, and
// safe for concurrent use. Both are required: New panics without them, a
// programmer error. A nil or empty list allows nothing, which is a valid
// deployment.
func New(allow *AllowList, capability func(conversationID string) string, opts *Options) *Server {
	if capability == nil {
		panic("egress: New needs a capability function")
	}
	o := defaults.Copy(opts)
	o.setDefaults()
	s := &Server{
		allow:      allow,
		capability: capability,
		opts:       o,
		logger:     o.Logger,
		dialer:     &dialer{resolver: o.Resolver, template: *o.Dialer, timeout: o.ConnectTimeout},
		slots:      newSlots(o.MaxTunnelsPerConversation, o.MaxTunnels),
		logLimit:   newLogLimiter(o.Now, o.LogInterval, o.LogBurst),
		tunnels:    map[*tunnel]struct{}{},
	}
	s.forwarder = s.newForwarder()
	var protocols http.Protocols
	protocols.SetHTTP1(true) // CONNECT over HTTP/2 is not needed by any client we serve
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		IdleTimeout:       o.IdleTimeout,
		Protocols:         &protocols,
		ErrorLog:          slog.NewLogLogger(o.Logger.Handler(), slog.LevelDebug),
	}
	return s
}

// Listen listens on addr (use a loopback address: "127.0.0.1:0" lets the
// kernel choose the port) and serves in the background until Shutdown.
func (s *Server) Listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		ln.Close()
		return ErrServerClosed
	}
	s.noteAddr(ln.Addr())
	s.serveWG.Add(1)
	go func() {
		defer s.serveWG.Done()
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("egress: serving stopped", "err", err)
		}
	}()
	return nil
}

// Serve serves on ln, a TCP or a unix listener, until Shutdown, when it
// returns nil; after Shutdown it closes ln and returns ErrServerClosed.
// Several Serve and Listen loops may run at once.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.noteAddr(ln.Addr())
	s.mu.Unlock()
	if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("egress: %w", err)
	}
	return nil
}

// noteAddr records the first listener's address, and the first TCP one's.
// s.mu must be held.
func (s *Server) noteAddr(a net.Addr) {
	if s.addr == nil {
		s.addr = a
	}
	if ta, ok := a.(*net.TCPAddr); ok && s.tcpAddr == nil {
		s.tcpAddr = ta
	}
}

// Addr is the address of the first listener, TCP or unix, nil before
// Listen or Serve.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// URLFor is the proxy URL of conversation id on the first TCP listener,
// with its credential: http://<id>:<capability>@127.0.0.1:<port> (a
// listener on every interface is named by loopback). It is a secret of
// that conversation's sandbox: never log it. URLFor panics before a TCP
// listener serves, a programmer error: a proxy served on a unix socket
// only is reached at an address of the sandbox's, given to URLForAddr.
func (s *Server) URLFor(id string) string {
	s.mu.Lock()
	ta := s.tcpAddr
	s.mu.Unlock()
	if ta == nil {
		panic("egress: URLFor before Listen or Serve on a TCP listener (use URLForAddr)")
	}
	host := ta.String()
	if ta.IP.IsUnspecified() {
		host = net.JoinHostPort("127.0.0.1", strconv.Itoa(ta.Port))
	}
	return s.URLForAddr(id, host)
}

// URLForAddr is the proxy URL of conversation id at the TCP address addr
// ("host:port"), with its credential: the address a sandboxed process
// dials, which for a sandbox without a network of its own is a relay
// inside it that forwards to the proxy's unix socket. Like URLFor's, the
// URL is a secret: never log it.
func (s *Server) URLForAddr(id, addr string) string {
	u := url.URL{Scheme: "http", User: url.UserPassword(id, s.capability(id)), Host: addr}
	return u.String()
}

// Env is ProxyEnv(URLFor(id)): the environment that points a sandboxed
// process of conversation id at the proxy's TCP listener.
func (s *Server) Env(id string) []string { return ProxyEnv(s.URLFor(id)) }

// ProxyEnv is the environment that points a process at the proxy URL u:
// HTTPS_PROXY and HTTP_PROXY in both cases (curl reads only the lower-case
// http_proxy), and NO_PROXY for loopback, so that a client still reaches
// the worker's LocalGatewayProxy directly.
func ProxyEnv(u string) []string {
	const noProxy = "127.0.0.1,localhost,::1"
	return []string{
		"HTTPS_PROXY=" + u, "https_proxy=" + u,
		"HTTP_PROXY=" + u, "http_proxy=" + u,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
	}
}

// Shutdown stops accepting, closes every open tunnel at once, and waits
// until ctx ends for plain-HTTP requests in flight, which it then cuts. It
// returns when every connection is closed and every Serve loop Listen
// started has returned, or with ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for t := range s.tunnels {
		t.abort()
	}
	s.mu.Unlock()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	done := make(chan struct{})
	go func() { // ends when the aborted tunnels have: an abort unblocks them at once
		s.tunnelsWG.Wait()
		s.serveWG.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		if err == nil {
			err = ctx.Err()
		}
	}
	if err != nil {
		return fmt.Errorf("egress: shutdown: %w", err)
	}
	return nil
}

// Stats are the proxy's counters since New.
type Stats struct {
	OpenTunnels      int64  // CONNECT tunnels open now
	OpenRequests     int64  // plain-HTTP requests being forwarded now
	Tunnels          uint64 // CONNECT tunnels established
	Requests         uint64 // plain-HTTP requests forwarded (whatever the upstream answered)
	Refused          uint64 // 403: not on the allow-list, or a non-public address
	Unauthenticated  uint64 // 407: no credential, or not the conversation's
	Limited          uint64 // 429 and 503: over a connection limit
	BadRequests      uint64 // 400: not a proxy request, or an unusable destination
	UpstreamFailures uint64 // 502 and 504: could not resolve, connect, or exchange
	BytesUp          uint64 // from clients to destinations, through tunnels
	BytesDown        uint64 // from destinations to clients, through tunnels
}

type counters struct {
	openTunnels, openRequests                                               atomic.Int64
	tunnels, requests, refused, unauthenticated, limited, bad, upstreamFail atomic.Uint64
	bytesUp, bytesDown                                                      atomic.Uint64
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	c := &s.stats
	return Stats{
		OpenTunnels: c.openTunnels.Load(), OpenRequests: c.openRequests.Load(),
		Tunnels: c.tunnels.Load(), Requests: c.requests.Load(),
		Refused: c.refused.Load(), Unauthenticated: c.unauthenticated.Load(),
		Limited: c.limited.Load(), BadRequests: c.bad.Load(),
		UpstreamFailures: c.upstreamFail.Load(),
		BytesUp:          c.bytesUp.Load(), BytesDown: c.bytesDown.Load(),
	}
}

// Why a destination was refused, in the log's "reason" field.
const (
	reasonNotAllowed        = "not_allowed"
	reasonNonPublic         = "non_public_address"
	reasonConversationLimit = "conversation_limit"
	reasonTotalLimit        = "total_limit"
	reasonUpstreamFailed    = "upstream_failed"
	reasonUpstreamTimeout   = "upstream_timeout"
	reasonUnresolvable      = "unresolvable"
	reasonUnusableName      = "bad_target"
	reasonNotAProxyRequest  = "not_a_proxy_request"
)

// ServeHTTP serves one proxy request: CONNECT host:port, or an absolute-form
// http:// request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A response write gets the idle timeout; a previous request's deadline
	// on the same connection must not apply to this one.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.opts.IdleTimeout))
	connect := r.Method == http.MethodConnect
	if !connect && !r.URL.IsAbs() {
		s.stats.bad.Add(1)
		s.logRefusal(r.Context(), "", target{}, reasonNotAProxyRequest, slog.LevelDebug)
		http.Error(w, "talkide egress proxy: this is a forward proxy; send CONNECT host:port, or an absolute-form http:// request", http.StatusBadRequest)
		return
	}
	conv, reason := s.authenticate(r)
	if reason != "" {
		s.stats.unauthenticated.Add(1)
		s.logAuthFailure(r, reason)
		w.Header().Set("Proxy-Authenticate", `Basic realm="talkide egress", charset="UTF-8"`)
		http.Error(w, "talkide egress proxy: proxy authentication required: use the proxy URL (with its credential) this conversation's sandbox was given", http.StatusProxyAuthRequired)
		return
	}
	if connect {
		s.serveConnect(w, r, conv)
		return
	}
	s.serveForward(w, r, conv)
}

// admit reads the request's destination from its authority (a CONNECT
// names its port, a forward defaults to 80), checks it against the
// allow-list and the connection limits, and answers the client when it is
// refused; rl and release are nil then.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, conv string, connect bool) (t target, rl *rule, release func()) {
	defaultPort := 80
	if connect {
		defaultPort = 0
	}
	t, err := parseTarget(r.URL.Host, defaultPort)
	if err != nil {
		s.badTarget(w, r, conv, err.Error())
		return t, nil, nil
	}
	rl = s.allow.match(t, connect)
	if rl == nil {
		s.refuse(w, r, conv, t, reasonNotAllowed, nil)
		return t, nil, nil
	}
	release, err = s.slots.acquire(conv)
	if err != nil {
		s.stats.limited.Add(1)
		status, reason := http.StatusTooManyRequests, reasonConversationLimit
		if errors.Is(err, errTotalLimit) {
			status, reason = http.StatusServiceUnavailable, reasonTotalLimit
		}
		s.logRefusal(r.Context(), conv, t, reason, slog.LevelWarn)
		w.Header().Set("Retry-After", "1")
		http.Error(w, "talkide egress proxy: "+err.Error()+"; close one and retry", status)
		return t, nil, nil
	}
	return t, rl, release
}

// refuse answers 403 for a destination the proxy will not reach, and logs
// it (rate-limited) with the conversation.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, conv string, t target, reason string, cause error) {
	s.stats.refused.Add(1)
	attrs := []any{}
	if cause != nil {
		attrs = append(attrs, "err", cause.Error())
	}
	s.logRefusal(r.Context(), conv, t, reason, slog.LevelWarn, attrs...)
	msg := fmt.Sprintf("talkide egress proxy: %s is not on the egress allow-list; to reach it, an operator adds it to %s.", t.hostPort(), s.opts.AllowListName)
	if reason == reasonNonPublic {
		msg = fmt.Sprintf("talkide egress proxy: %s resolves to a loopback, private or otherwise non-public address, which its entry on the egress allow-list does not permit; to reach it, an operator sets \"private\": true on that entry in %s.", t.hostPort(), s.opts.AllowListName)
	}
	http.Error(w, msg, http.StatusForbidden)
}

// failUpstream answers 502 (504 for a timeout) for a destination that was
// allowed but could not be reached.
func (s *Server) failUpstream(w http.ResponseWriter, r *http.Request, conv string, t target, err error) {
	s.stats.upstreamFail.Add(1)
	status, reason := http.StatusBadGateway, reasonUpstreamFailed
	var dnsErr *net.DNSError
	switch {
	case isTimeout(err):
		status, reason = http.StatusGatewayTimeout, reasonUpstreamTimeout
	case errors.As(err, &dnsErr), errors.Is(err, errNoAddress):
		reason = reasonUnresolvable
	}
	s.logRefusal(r.Context(), conv, t, reason, slog.LevelWarn, "err", err.Error())
	http.Error(w, fmt.Sprintf("talkide egress proxy: %s could not be reached (%s)", t.hostPort(), reason), status)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// logRefusal logs a refused request with its conversation and destination,
// at most LogBurst lines per conversation per LogInterval.
func (s *Server) logRefusal(ctx context.Context, conv string, t target, reason string, level slog.Level, attrs ...any) {
	if !s.logger.Enabled(ctx, level) {
		return
	}
	ok, suppressed := s.logLimit.allow(conv)
	if !ok {
		return
	}
	args := []any{"conversation", conv, "host", t.host, "port", t.port, "reason", reason}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	s.logger.Log(ctx, level, "egress: request refused", append(args, attrs...)...)
}

// logAuthFailure logs a request without a valid credential. It names no
// conversation (the one claimed is not proven) and never the credential.
func (s *Server) logAuthFailure(r *http.Request, reason string) {
	if !s.logger.Enabled(r.Context(), slog.LevelWarn) {
		return
	}
	ok, suppressed := s.logLimit.allow("")
	if !ok {
		return
	}
	args := []any{"reason", reason, "remote", r.RemoteAddr, "method", r.Method}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	s.logger.Warn("egress: proxy authentication failed", args...)
}
