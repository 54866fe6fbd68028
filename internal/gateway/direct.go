package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/talkide/platform/internal/headlimit"
	"github.com/talkide/platform/internal/rawio"
)

// directTransport is the default Transport for the gateway's one upstream:
// HTTP/1.1, over TLS for https, written and read on the calling goroutine.
//
// http.Transport hands every request to two goroutines of its connection:
// a write loop that writes the request and a read loop that reads the
// response's head and passes it back over a channel. On a machine that is
// otherwise idle each hand-off is a sleeping thread woken (bench/gateway
// against nginx: most of what the gateway added to the time to the first
// byte). Here the handler's goroutine writes the request, reads the head
// and then the body, as nginx's one event loop does; an idle connection is
// checked with a non-blocking peek before it is reused instead of being
// watched by a goroutine.
//
// It speaks HTTP/1.1 only, also over TLS (ALPN "http/1.1"): over HTTP/2
// each event of every stream passes through the connection's own reader
// goroutine, a hand-off per event, whereas a connection per stream is read
// directly; api.anthropic.com serves both. Requests for any other scheme
// or host, and every request when a proxy is configured for the upstream
// (HTTPS_PROXY, HTTP_PROXY), go to fallback.
type directTransport struct {
	scheme      string // "http" or "https"
	host        string // the URL's host[:port], as requests name it
	addr        string // host:port dialed
	tls         *tls.Config
	dialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	fallback    http.RoundTripper

	maxIdle     int
	idleTimeout time.Duration

	mu    sync.Mutex
	idle  []*directConn // most recently used last
	reap  *time.Timer   // closes connections idle for longer than idleTimeout; nil when none is idle
	dials int           // connections dialed, for tests
}

// tlsHandshakeTimeout bounds a TLS handshake, as http.DefaultTransport's.
const tlsHandshakeTimeout = 10 * time.Second

// newDirectTransport returns the transport for upstream, or nil when
// upstream is not a plain http or https URL, or when a proxy is configured
// for it: then http.Transport (fallback) serves it. tlsConf, when set, is
// the base TLS configuration (tests give their server's root).
func newDirectTransport(scheme, host string, tlsConf *tls.Config, fallback http.RoundTripper) *directTransport {
	port := "80"
	if scheme == "https" {
		port = "443"
	} else if scheme != "http" {
		return nil
	}
	if p, err := http.ProxyFromEnvironment(&http.Request{URL: &url.URL{Scheme: scheme, Host: host}}); err != nil || p != nil {
		return nil
	}
	addr := host
	if _, _, err := net.SplitHostPort(host); err != nil {
		addr = net.JoinHostPort(host, port)
	}
	t := &directTransport{
		scheme: scheme, host: host, addr: addr, fallback: fallback,
		dialContext: (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		maxIdle:     DefaultMaxIdleConns,
		idleTimeout: 90 * time.Second,
	}
	if scheme == "https" {
		c := &tls.Config{}
		if tlsConf != nil {
			c = tlsConf.Clone()
		}
		if c.ServerName == "" {
			c.ServerName, _, _ = net.SplitHostPort(addr)
		}
		c.NextProtos = []string{"http/1.1"}
		t.tls = c
	}
	return t
}

// directConn is one upstream connection. It is used by one call at a time.
type directConn struct {
	t         *directTransport
	nc        net.Conn
	sock      net.Conn        // the socket under nc's TLS, read raw (internal/rawio)
	raw       syscall.RawConn // the TCP connection's, for the idle check; nil if none
	br        *bufio.Reader
	head      headlimit.Reader // what br may read while a response's head is read
	idleSince time.Time
}

// Bounds on a response's head, as http.Transport keeps them: an upstream
// that sends headers without end, or interim answers without end, costs a
// call, not the gateway's memory.
const (
	maxResponseHead = 1 << 20
	maxInterim      = 5
)

var errHeadTooLarge = errors.New("gateway: the upstream's response head is too large")

// writers hold a request while it is written: one write for a head and a
// body up to their size (a 4 KiB buffer took five for bench/gateway's 16
// KiB, each a wake-up of the upstream's reader). They are lent only for the
// write, so idle connections hold none.
var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}

// oneWrite is a *bufio.Writer that Request.Write does not recognise as
// one, so it keeps the head buffered with the body. It is an
// io.ByteWriter, so Request.Write adds no buffer of its own, and an
// io.ReaderFrom, so the body is copied into the buffer without one.
type oneWrite struct{ bw *bufio.Writer }

func (w oneWrite) Write(p []byte) (int, error)               { return w.bw.Write(p) }
func (w oneWrite) WriteByte(c byte) error                    { return w.bw.WriteByte(c) }
func (w oneWrite) WriteString(s string) (int, error)         { return w.bw.WriteString(s) }
func (w oneWrite) ReadFrom(r io.Reader) (n int64, err error) { return w.bw.ReadFrom(r) }

// errUpgrade refuses a 101: no protocol switch goes through the gateway.
var errUpgrade = errors.New("gateway: the upstream switched protocols")

func (t *directTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != t.scheme || req.URL.Host != t.host {
		return t.fallback.RoundTrip(req)
	}
	ctx := req.Context()
	pc, err := t.get(ctx)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	// A connection that the upstream closes between the check in get and
	// the write fails this call (a 502). http.Transport, whose read loop
	// notices a close at once, would not resend a POST either once it is
	// written.
	return pc.roundTrip(ctx, req)
}

// roundTrip sends req on pc and reads the response's head. pc is closed on
// an error, and given back to the pool when the response's body has been
// read to its end.
func (pc *directConn) roundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	// A cancelled call unblocks its reads and writes at once.
	stop := context.AfterFunc(ctx, func() { pc.nc.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (*http.Response, error) {
		stop()
		pc.nc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(pc.nc)
	written, err := writeHeld(bw, req)
	_, held := req.Body.(*heldReader)
	switch {
	case written: // a gateway call's request
	case held || req.Body == nil || req.Body == http.NoBody:
		// A gateway call's body is held in memory and cannot block, so
		// the head need not go out ahead of it: Request.Write flushes a
		// *bufio.Writer after the head for any body it does not know,
		// which sent the head and the body in two writes, two wake-ups of
		// the upstream.
		err = req.Write(oneWrite{bw})
	default:
		err = req.Write(bw)
	}
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	writers.Put(bw)
	if err != nil {
		return fail(err)
	}
	var res *http.Response
	// What br holds already was read under an earlier bound.
	pc.head.Left = maxResponseHead
	for interim := 0; ; interim++ {
		var err error
		if res, err = http.ReadResponse(pc.br, req); err != nil {
			return fail(err)
		}
		if res.StatusCode == http.StatusSwitchingProtocols {
			return fail(errUpgrade)
		}
		if res.StatusCode >= 200 || res.StatusCode < 100 {
			break
		}
		// 100 Continue and other interim answers: the final one follows.
		if interim == maxInterim {
			return fail(errors.New("gateway: the upstream sent too many interim responses"))
		}
	}
	pc.head.Left = -1
	if res.ContentLength >= 0 || len(res.TransferEncoding) > 0 {
		// The body's reads are held (rawio.Hold): an event of the stream
		// costs one read, not a read and an empty one. Released when the
		// connection goes back to the pool, whose check peeks at the
		// socket; Close ends a held read itself. A body that only the
		// connection's close ends is read plainly: a held read notices a
		// close that came with the last bytes only after a while.
		rawio.Hold(pc.sock)
	}
	res.Body = &directBody{pc: pc, ctx: ctx, rc: res.Body, stop: stop, reuse: !res.Close && !req.Close}
	return res, nil
}

// directBody is a response's body; at its end its connection goes back to
// the pool.
type directBody struct {
	ctx   context.Context
	rc    io.ReadCloser
	stop  func() bool
	reuse bool

	mu sync.Mutex
	pc *directConn // nil once done with
}

func (b *directBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil {
		b.done(err == io.EOF)
		if err != io.EOF && b.ctx.Err() != nil {
			err = b.ctx.Err()
		}
	}
	return n, err
}

// buffered is how much of the body has arrived unread; 0 once done with.
func (b *directBody) buffered() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pc == nil {
		return 0
	}
	return b.pc.br.Buffered()
}

// Close before the end closes the connection: what is left of the
// response would have to be read before another could use it.
func (b *directBody) Close() error {
	b.done(false)
	return nil
}

func (b *directBody) done(eof bool) {
	b.mu.Lock()
	pc := b.pc
	b.pc = nil
	b.mu.Unlock()
	if pc == nil {
		return
	}
	// stop reports false when the call's context ended, and with it the
	// connection's deadline is set in the past.
	if b.stop() && eof && b.reuse {
		rawio.Release(pc.sock)
		pc.t.put(pc)
		return
	}
	pc.nc.Close()
}

// get returns an idle connection that is still open, or a new one.
func (t *directTransport) get(ctx context.Context) (pc *directConn, err error) {
	now := time.Now()
	for {
		t.mu.Lock()
		n := len(t.idle)
		if n == 0 {
			t.mu.Unlock()
			break
		}
		pc = t.idle[n-1]
		t.idle[n-1] = nil
		t.idle = t.idle[:n-1]
		t.mu.Unlock()
		if now.Sub(pc.idleSince) < t.idleTimeout && pc.open() {
			return pc, nil
		}
		pc.nc.Close()
	}
	return t.dial(ctx)
}

// open says whether an idle connection can carry a request: the upstream
// has neither closed it nor sent anything on it unasked (a close_notify,
// a timeout's 408).
func (pc *directConn) open() bool {
	if pc.br.Buffered() > 0 {
		return false
	}
	if _, ok := pc.nc.(*tls.Conn); ok {
		// Bytes past the last response that came in its TLS record are
		// held decrypted inside the TLS connection, where neither the
		// buffer above nor the socket's peek sees them; the next call
		// would read them as its response. A read that cannot wait finds
		// them, and leaves a partial record where it was.
		pc.nc.SetReadDeadline(time.Unix(1, 0))
		_, err := pc.br.Peek(1)
		pc.nc.SetReadDeadline(time.Time{})
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return false
		}
	}
	if pc.raw == nil {
		return true
	}
	return peekOpen(pc.raw)
}

func (t *directTransport) dial(ctx context.Context) (*directConn, error) {
	nc, err := t.dialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	pc := &directConn{t: t, nc: nc}
	if sc, ok := nc.(syscall.Conn); ok {
		pc.raw, _ = sc.SyscallConn()
	}
	// Read and written with raw system calls (internal/rawio): no wake-up
	// of the runtime's monitor thread per event.
	nc = rawio.Wrap(nc)
	pc.nc, pc.sock = nc, nc
	if t.tls != nil {
		tc := tls.Client(nc, t.tls)
		hctx, cancel := context.WithTimeout(ctx, tlsHandshakeTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			nc.Close()
			return nil, err
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != "" && p != "http/1.1" {
			tc.Close()
			return nil, errors.New("gateway: the upstream negotiated " + p + ", not http/1.1")
		}
		pc.nc = tc
	}
	pc.head = headlimit.Reader{R: pc.nc, Left: -1, Err: errHeadTooLarge}
	pc.br = bufio.NewReaderSize(&pc.head, 4<<10)
	t.mu.Lock()
	t.dials++
	t.mu.Unlock()
	return pc, nil
}

// put keeps pc for the next call, unless the pool is full.
func (t *directTransport) put(pc *directConn) {
	pc.idleSince = time.Now()
	t.mu.Lock()
	if len(t.idle) >= t.maxIdle {
		t.mu.Unlock()
		pc.nc.Close()
		return
	}
	t.idle = append(t.idle, pc)
	if t.reap == nil {
		t.reap = time.AfterFunc(t.idleTimeout, t.reapIdle)
	}
	t.mu.Unlock()
}

// reapIdle closes the connections idle for longer than idleTimeout, so
// that a gateway without calls does not hold them open.
func (t *directTransport) reapIdle() {
	now := time.Now()
	var old []*directConn
	t.mu.Lock()
	i := 0
	for i < len(t.idle) && now.Sub(t.idle[i].idleSince) >= t.idleTimeout {
		i++
	}
	old = append(old, t.idle[:i]...)
	n := copy(t.idle, t.idle[i:])
	clear(t.idle[n:])
	t.idle = t.idle[:n]
	t.reap = nil
	if len(t.idle) > 0 {
		t.reap = time.AfterFunc(t.idleTimeout-now.Sub(t.idle[0].idleSince), t.reapIdle)
	}
	t.mu.Unlock()
	for _, pc := range old {
		pc.nc.Close()
	}
}

// CloseIdleConnections closes the idle connections, of both transports.
func (t *directTransport) CloseIdleConnections() {
	t.mu.Lock()
	old := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, pc := range old {
		pc.nc.Close()
	}
	if ci, ok := t.fallback.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}
