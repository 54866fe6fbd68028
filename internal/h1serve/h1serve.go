// Package h1serve serves the requests of one hot route over HTTP/1.1 on a
// loop of its own, and hands every other connection to net/http.
//
// net/http's server costs a proxy of streamed calls more than the proxy's
// own work: each request starts a goroutine that reads the connection in
// the background (to notice a client going away), and ends it again once
// the handler returns, which wakes sleeping threads twice per call; each
// request also gets a context with its own cancellation, a response
// writer with two buffers, and chunking through a second writer. Measured
// beside nginx on one machine (bench/gateway's go-floor modes), a bare Go
// proxy on net/http's server added 0.08 ms to a call's first byte and
// 0.09 ms of CPU per call; the same proxy on a loop like this one added
// nothing measurable over nginx.
//
// What the loop gives up, on purpose: a request's context is cancelled
// when the client goes away only once the request has run for
// WatchAfter (1 s by default) with its body read; a call that ends
// sooner never pays for a watch of its connection (a write to a client
// that went away fails in any case). There is no HTTP/2, no Hijack, no
// CloseNotify and no content sniffing (a handler on the hot route sets its
// Content-Type). Everything else a handler relies on is there:
// keep-alive, Content-Length or chunked framing, Flush through
// http.ResponseController, read deadlines, trailers, Expect:
// 100-continue, the head's size bound and timeouts, the checks net/http
// makes of a request's head, and a graceful shutdown.
package h1serve

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/talkide/platform/internal/headlimit"
)

// Server serves, on the loop, the requests whose target starts with
// HotPrefix; a connection whose request is for anything else goes, from
// that request on, to the net/http server that serves the listener Start
// returns.
type Server struct {
	Handler   http.Handler
	HotPrefix string
	// ReadHeaderTimeout bounds the reading of a request's head (from its
	// first byte), IdleTimeout the wait for the next request on a kept
	// connection; 0 means none, as in net/http.
	ReadHeaderTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's head; 0: http.DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// BodyTimeout bounds the reading of a request's body, from the end of
	// its head, so that a client that trickles a body cannot hold a
	// connection and a handler's buffer; it is lifted once the body has
	// been read to its end, so that the watch of a long answer (which
	// reads the connection) does not fail on it. 0 means none. It is what
	// a handler wrapped in httpapi.BodyDeadline gets, without the copy of
	// the request and the second deadline that wrapper costs each call.
	BodyTimeout time.Duration
	// WatchAfter is how long a request runs, its body read, before the
	// connection is watched for the client going away (which cancels the
	// request's context); 0: DefaultWatchAfter.
	WatchAfter time.Duration
	Logger     *slog.Logger

	ln      net.Listener
	rest    *restListener
	closing atomic.Bool
	mu      sync.Mutex
	conns   map[*conn]struct{}
	done    chan struct{} // closed when the accept loop has ended
}

// DefaultWatchAfter is Server.WatchAfter's default.
const DefaultWatchAfter = time.Second

// Start accepts ln's connections and returns the listener a net/http
// server must serve for the rest. Closing that listener, or Shutdown,
// ends the accepting.
func (s *Server) Start(ln net.Listener) net.Listener {
	s.ln = ln
	s.conns = map[*conn]struct{}{}
	s.done = make(chan struct{})
	s.rest = &restListener{s: s, conns: make(chan net.Conn), closed: make(chan struct{})}
	go s.accept()
	go s.watch()
	return s.rest
}

func (s *Server) watchAfter() time.Duration {
	if s.WatchAfter > 0 {
		return s.WatchAfter
	}
	return DefaultWatchAfter
}

// watch starts, every half WatchAfter until the server closes, the watch
// of each connection whose request has run for WatchAfter. One ticker for
// all connections costs a request nothing: a timer per request (or a
// read in the background from its start, as net/http has) woke a
// sleeping thread for every call.
func (s *Server) watch() {
	after := s.watchAfter()
	tick := time.NewTicker(max(after/2, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			return
		case now := <-tick.C:
			s.mu.Lock()
			for c := range s.conns {
				c.maybeWatch(now, after)
			}
			s.mu.Unlock()
		}
	}
}

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

func (s *Server) accept() {
	defer close(s.done)
	var backoff time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() || isTemporary(err) {
				// As net/http does: out of descriptors, for instance; wait
				// a little and go on.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			s.rest.fail(err)
			return
		}
		backoff = 0
		c := newConn(s, nc)
		if !s.track(c, true) {
			nc.Close()
			continue
		}
		go c.serve()
	}
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// track adds or removes c; it refuses to add once the server is closing.
func (s *Server) track(c *conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.closing.Load() {
			return false
		}
		s.conns[c] = struct{}{}
	} else {
		delete(s.conns, c)
	}
	return true
}

// Shutdown stops accepting, closes the connections that wait for a
// request, lets those serving one finish it (and then closes them), and
// returns once none is left or ctx is done. The net/http server of the
// rest has a Shutdown of its own.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.closeIdle() == 0 {
			<-s.done
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// Close closes the listener and every connection of the loop at once.
func (s *Server) Close() error {
	err := s.stop()
	s.mu.Lock()
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	<-s.done
	return err
}

func (s *Server) stop() error {
	s.mu.Lock()
	first := !s.closing.Swap(true)
	s.mu.Unlock()
	if !first {
		return nil
	}
	return s.ln.Close()
}

// closeIdle closes the connections waiting for a request and returns how
// many are left.
func (s *Server) closeIdle() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.idle.Load() {
			c.nc.Close()
		}
	}
	return len(s.conns)
}

// restListener yields the connections handed to net/http.
type restListener struct {
	s      *Server
	conns  chan net.Conn
	once   sync.Once
	closed chan struct{}
	err    error // the accept loop's, once closed
}

func (l *restListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

// fail ends Accept with err (the listener's own error).
func (l *restListener) fail(err error) {
	l.once.Do(func() { l.err = err; close(l.closed) })
}

// hand gives nc to net/http, or closes it when nobody accepts any more.
func (l *restListener) hand(nc net.Conn) {
	select {
	case l.conns <- nc:
	case <-l.closed:
		nc.Close()
	}
}

func (l *restListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.s.stop()
}

func (l *restListener) Addr() net.Addr { return l.s.ln.Addr() }

// conn is one connection on the loop.
type conn struct {
	s    *Server
	nc   net.Conn
	lim  headlimit.Reader
	br   *bufio.Reader
	bw   *bufio.Writer
	ctx  context.Context
	idle atomic.Bool
	// remote is the client's address as a request's RemoteAddr gives it,
	// formatted once for the connection's requests.
	remote string

	wmu sync.Mutex
	// guarded by wmu: the request being served (cancel is nil between
	// requests), its body, when it started, and its watch's end (nil
	// while the connection is not watched).
	cancel   context.CancelFunc
	body     *watchedBody
	since    time.Time
	watching chan struct{}
	// gone is set by the watch when the client went away.
	gone atomic.Bool
	// linger: the connection ends with a request's body unread, after a
	// whole answer; it is closed as net/http closes it (lingerClose).
	linger bool
}

// watchedBody is the body a handler reads, one per request. It notes
// that the body was read to its end (only then may the watch read the
// connection). Its Close reads nothing, as net/http's server's does not
// read more than a bound: what the handler left is the server's to drain
// or to close the connection on. Once its request is over it reads
// nothing of the connection, so a handler that kept it never reads the
// next request's body.
type watchedBody struct {
	rc                  io.ReadCloser
	done, closed, ended atomic.Bool
	// bounded is set while the body's read deadline (BodyTimeout) is
	// on the connection: the read that ends the body lifts it.
	bounded bool
	c       *conn
}

func (b *watchedBody) Read(p []byte) (int, error) {
	if b.ended.Load() {
		return 0, io.EOF
	}
	if b.closed.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		if b.bounded {
			// Before done: only then may the watch read the connection,
			// which must not see the body's deadline. Only while the
			// request is on: a read that a handler left running ends
			// late, after the loop set the next deadline.
			b.bounded = false
			b.c.wmu.Lock()
			if b.c.body == b {
				b.c.nc.SetReadDeadline(time.Time{})
			}
			b.c.wmu.Unlock()
		}
		b.done.Store(true)
	}
	return n, err
}

func (b *watchedBody) Close() error {
	b.closed.Store(true)
	return nil
}

// begin notes the start of a request whose context cancel cancels, and
// gives the handler its body.
func (c *conn) begin(cancel context.CancelFunc, req *http.Request, bounded bool) *watchedBody {
	b := &watchedBody{rc: req.Body, bounded: bounded, c: c}
	b.done.Store(req.Body == http.NoBody)
	req.Body = b
	c.wmu.Lock()
	c.cancel, c.body, c.since = cancel, b, time.Now()
	c.wmu.Unlock()
	return b
}

// end notes the end of the request, stops its watch and says whether the
// client went away.
func (c *conn) end() (gone bool) {
	c.wmu.Lock()
	c.cancel = nil
	b := c.body
	c.body = nil
	w := c.watching
	c.watching = nil
	c.wmu.Unlock()
	if w != nil {
		// As net/http ends its background read: a deadline in the past.
		c.nc.SetReadDeadline(aLongTimeAgo)
		<-w
		c.nc.SetReadDeadline(time.Time{})
	}
	// A handler that kept the body reads its end, not the next request.
	b.ended.Store(true)
	return c.gone.Load()
}

var aLongTimeAgo = time.Unix(1, 0)

// maybeWatch starts the watch of c when its request has run for after
// with its body read. The watch reads the connection: a read that fails
// but for a deadline means the client went away, and cancels the
// request; one that returns bytes (the next request, pipelined) ends the
// watch and leaves them buffered.
func (c *conn) maybeWatch(now time.Time, after time.Duration) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.cancel == nil || c.watching != nil || now.Sub(c.since) < after || !c.body.done.Load() {
		return
	}
	done := make(chan struct{})
	c.watching = done
	cancel := c.cancel
	go func() {
		defer close(done)
		_, err := c.br.Peek(1)
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		c.gone.Store(true)
		cancel()
	}()
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, remote: nc.RemoteAddr().String()}
	c.lim = headlimit.Reader{R: nc, Left: -1, Err: errHeadTooLarge}
	c.br = bufio.NewReaderSize(&c.lim, 4<<10)
	c.bw = bufio.NewWriterSize(nc, 4<<10)
	c.ctx = context.WithValue(context.Background(), http.LocalAddrContextKey, nc.LocalAddr())
	return c
}

var errHeadTooLarge = errors.New("request head too large")

func (c *conn) serve() {
	handed := false
	defer func() {
		if c.linger {
			c.lingerClose() // while tracked: Close ends it at once
		}
		c.s.track(c, false)
		if !handed {
			c.nc.Close()
		}
	}()
	maxHead := int64(c.s.MaxHeaderBytes)
	if maxHead <= 0 {
		maxHead = http.DefaultMaxHeaderBytes
	}
	for {
		c.idle.Store(true)
		if c.s.closing.Load() {
			return
		}
		c.readWithin(c.s.IdleTimeout) // and not a handler's of the last request
		// The head's bound counts from what the wait for it reads: what
		// is already buffered (a pipelined request) is exempt, and the
		// reader's look-ahead is allowed as net/http allows it.
		c.lim.Left = maxHead + int64(c.br.Size())
		if _, err := c.br.Peek(1); err != nil {
			return
		}
		c.idle.Store(false)
		if c.s.closing.Load() {
			// Shutdown may have missed it while it turned busy; the
			// request is not read, so the client retries it elsewhere.
			return
		}
		c.readWithin(c.s.ReadHeaderTimeout)
		hot, ok := c.hot()
		if !ok {
			return // the head timed out or the client left before it told
		}
		if !hot {
			c.lim.Left = -1
			c.nc.SetReadDeadline(time.Time{})
			c.s.track(c, false)
			handed = true
			c.s.rest.hand(&handedConn{Conn: c.nc, br: c.br})
			return
		}
		req, err := http.ReadRequest(c.br)
		c.lim.Left = -1
		if err == nil {
			err = checkRequest(req)
		}
		if err != nil {
			c.refuse(err)
			return
		}
		// One deadline for what is left to read of the request: its
		// body's, or none.
		var body time.Duration
		if req.Body != http.NoBody {
			body = c.s.BodyTimeout
		}
		c.readWithin(body)
		if !c.serveOne(req, body > 0) {
			return
		}
	}
}

// readWithin sets the connection's read deadline d from now; 0 is none.
func (c *conn) readWithin(d time.Duration) {
	var t time.Time
	if d > 0 {
		t = time.Now().Add(d)
	}
	c.nc.SetReadDeadline(t)
}

// hot says whether the request at the head of the buffer is for the hot
// route, reading no more than it needs to tell and consuming nothing. A
// line it cannot make sense of is not hot: net/http answers it. ok is
// false when the read failed before it could tell (the head's timeout, a
// client gone): the connection ends, as net/http would end it, rather
// than going to net/http with a head timeout of its own.
func (c *conn) hot() (hot, ok bool) {
	prefix := c.s.HotPrefix
	n := 1
	for {
		b, err := c.br.Peek(n)
		if len(b) > 0 {
			if v, ok := decideHot(b, prefix); ok {
				return v, true
			}
		}
		if err != nil {
			return false, false
		}
		if n >= c.br.Size() {
			return false, true
		}
		n = max(n+1, c.br.Buffered())
	}
}

// decideHot tells from the start b of a request line whether its target
// starts with prefix, when b is enough to tell.
func decideHot(b []byte, prefix string) (hot, decided bool) {
	sp := bytes.IndexByte(b, ' ')
	if sp < 0 {
		if bytes.IndexAny(b, "\r\n") >= 0 {
			return false, true
		}
		return false, false
	}
	t := b[sp+1:]
	if len(t) >= len(prefix) {
		return string(t[:len(prefix)]) == prefix, true
	}
	if bytes.IndexAny(t, " \r\n") >= 0 || string(t) != prefix[:len(t)] {
		return false, true
	}
	return false, false
}

// badRequest is a request the server refuses after reading its head.
type badRequest struct {
	status int
	msg    string
}

func (e *badRequest) Error() string { return e.msg }

// checkRequest makes the checks net/http's server makes of a request
// beyond what http.ReadRequest parses: the version, a valid Host for
// HTTP/1.1, header names and values a proxy may pass on. (ReadRequest
// has moved the Host header, refused a second one, into req.Host; an
// empty Host header, which net/http accepts, is refused here.)
func checkRequest(req *http.Request) error {
	if req.ProtoMajor != 1 {
		return &badRequest{http.StatusHTTPVersionNotSupported, "unsupported protocol version"}
	}
	switch {
	case req.Host == "" && req.ProtoAtLeast(1, 1) && req.Method != http.MethodConnect:
		return &badRequest{http.StatusBadRequest, "missing required Host header"}
	case req.Host != "" && !httpguts.ValidHostHeader(req.Host):
		return &badRequest{http.StatusBadRequest, "malformed Host header"}
	}
	for k, vs := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return &badRequest{http.StatusBadRequest, "invalid header name"}
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return &badRequest{http.StatusBadRequest, "invalid header value"}
			}
		}
	}
	return nil
}

// refuse answers a request that could not be read, as net/http does, and
// the connection is closed after it.
func (c *conn) refuse(err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return
	}
	status, msg := http.StatusBadRequest, "malformed request"
	var bad *badRequest
	switch {
	case errors.Is(err, errHeadTooLarge):
		status, msg = http.StatusRequestHeaderFieldsTooLarge, "request head too large"
	case errors.As(err, &bad):
		status, msg = bad.status, bad.msg
	}
	line := strconv.Itoa(status) + " " + http.StatusText(status)
	c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c.nc, "HTTP/1.1 "+line+"\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"+line+": "+msg); err != nil {
		return
	}
	c.linger = true
}

// lingerClose prepares the close of a connection whose client may still
// be sending (a request's body unread): closing with bytes unread would
// reset the connection, and the client could lose the answer still
// queued. It ends the sending side and reads what the client still sends
// for a moment (as net/http waits before it closes). A client still
// sending past 256 KiB is not read on (what it sends is its to waste, not
// the server's to read) but still given the moment: closing at once would
// reset the connection while the answer was queued.
func (c *conn) lingerClose() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	deadline := time.Now().Add(500 * time.Millisecond)
	c.nc.SetReadDeadline(deadline)
	if n, _ := io.CopyN(io.Discard, c.nc, 256<<10); n == 256<<10 {
		time.Sleep(time.Until(deadline))
	}
}

// serveOne runs the handler for req and says whether the connection may
// carry another request.
func (c *conn) serveOne(req *http.Request, bounded bool) (keep bool) {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	req = req.WithContext(ctx)
	req.RemoteAddr = c.remote
	w := &response{c: c, req: req, header: make(http.Header, 8), contentLength: -1}
	if ex := req.Header.Get("Expect"); ex != "" {
		if !req.ProtoAtLeast(1, 1) || !strings.EqualFold(ex, "100-continue") {
			w.closeAfter = true
			w.WriteHeader(http.StatusExpectationFailed)
			c.linger = w.finish() // its body may follow, unread
			return false
		}
		req.Body = &continueReader{ReadCloser: req.Body, w: w}
	}
	body := req.Body // what the server drains; the handler's closes nothing
	wb := c.begin(cancel, req, bounded)
	panicked := c.run(w, req)
	gone := c.end()
	if panicked {
		return false
	}
	// The answer is ended for a client that went away too: one that shut
	// only its sending side (what the watch sees as gone) still reads it,
	// and a write to one that left fails at once.
	if !w.finish() || gone {
		return false
	}
	c.nc.SetWriteDeadline(time.Time{}) // a handler's ends with its request, as in net/http
	if w.closeAfter || req.Close || c.s.closing.Load() {
		c.linger = !wb.done.Load()
		return false
	}
	// What the handler left of the body is read and dropped, within
	// reason, so that the next request starts where it should.
	if cr, ok := body.(*continueReader); ok && !cr.sent {
		c.linger = true
		return false // the client waits for 100-continue and sent nothing
	}
	n, err := io.CopyN(io.Discard, body, 256<<10)
	if n < 256<<10 && err == io.EOF {
		return true
	}
	c.linger = true
	return false
}

// run serves req and says whether the handler panicked.
func (c *conn) run(w *response, req *http.Request) (panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler {
				c.s.logger().Error("h1serve: panic serving a request", "target", req.URL.Path, "panic", p, "stack", string(debug.Stack()))
			}
			panicked = true
		}
	}()
	c.s.Handler.ServeHTTP(w, req)
	return false
}

// continueReader sends "100 Continue" before the first read of the body.
type continueReader struct {
	io.ReadCloser
	w    *response
	sent bool
}

func (r *continueReader) Read(p []byte) (int, error) {
	if !r.sent {
		r.sent = true
		if !r.w.wroteHeader {
			bw := r.w.c.bw
			bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			if err := bw.Flush(); err != nil {
				return 0, err
			}
		}
	}
	return r.ReadCloser.Read(p)
}

// handedConn is a connection handed to net/http with what the loop read
// of it first.
type handedConn struct {
	net.Conn
	br *bufio.Reader
}

func (h *handedConn) Read(p []byte) (int, error) {
	if h.br != nil {
		if h.br.Buffered() > 0 {
			return h.br.Read(p)
		}
		h.br = nil
	}
	return h.Conn.Read(p)
}

// CloseWrite lets net/http end the connection gracefully, as it does a
// *net.TCPConn.
func (h *handedConn) CloseWrite() error {
	if cw, ok := h.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
