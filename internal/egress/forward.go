package egress

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"sync/atomic"
	"time"
)

// forwardKey carries a plain-HTTP request's checked destination from
// serveForward to the transport's dial, so that the connection goes where
// the allow-list allowed and nowhere else.
type forwardKey struct{}

type forwardDest struct {
	conv    string
	target  target
	private bool
}

// maxResponseHeaderBytes bounds a destination's response header.
const maxResponseHeaderBytes = 1 << 20

// newForwarder is the plain-HTTP half of the proxy, on
// httputil.ReverseProxy: it strips hop-by-hop headers (Proxy-Authorization
// among them) both ways, streams bodies without buffering them, and routes
// every failure through one handler.
func (s *Server) newForwarder() *httputil.ReverseProxy {
	tr := &http.Transport{
		Proxy:       nil, // never the worker's own proxy settings
		DialContext: s.dialForward,
		// One connection per request: it is counted against the limits
		// while it is used and closed after, and no connection dialled for
		// one conversation is reused by another.
		DisableKeepAlives:      true,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		DisableCompression:     true, // pass the client's Accept-Encoding and the body through untouched
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.User = nil
			pr.Out.Host = "" // the URL's host, which is what was checked
			// ReverseProxy has removed the hop-by-hop headers and added
			// back Connection and Upgrade for an upgrade; a plain-HTTP
			// upgrade would be a tunnel outside the tunnel limits, so it
			// is not offered to the destination.
			for _, h := range []string{"Proxy-Authorization", "Proxy-Connection", "Connection", "Upgrade"} {
				pr.Out.Header.Del(h)
			}
		},
		Transport:     tr,
		FlushInterval: -1,
		ErrorHandler:  s.forwardError,
		// ReverseProxy's few own lines (a body copy cut short) go to the
		// injected logger, never the process's standard one.
		ErrorLog: slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug),
	}
}

// serveForward forwards an absolute-form request to an http:// destination.
func (s *Server) serveForward(w http.ResponseWriter, r *http.Request, conv string) {
	if r.URL.Scheme != "http" {
		s.badTarget(w, r, conv, "only http:// URLs are forwarded; for https, send CONNECT host:443")
		return
	}
	if r.URL.Host == "" {
		s.badTarget(w, r, conv, "the URL has no host")
		return
	}
	t, rl, release := s.admit(w, r, conv, false)
	if rl == nil {
		return
	}
	defer release()
	s.stats.openRequests.Add(1)
	defer s.stats.openRequests.Add(-1)
	s.stats.requests.Add(1)

	rc := http.NewResponseController(w)
	// A proxy relays the answer as it comes, even while the client is still
	// sending its body (a server may answer early, with 413 or 401).
	_ = rc.EnableFullDuplex()
	ctx := context.WithValue(r.Context(), forwardKey{}, forwardDest{conv: conv, target: t, private: rl.private})
	r = r.WithContext(ctx)
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &idleBody{ReadCloser: r.Body, rc: rc, idle: s.opts.IdleTimeout}
	}
	s.forwarder.ServeHTTP(&idleWriter{ResponseWriter: w, rc: rc, idle: s.opts.IdleTimeout}, r)
}

// dialForward dials the destination serveForward checked, ignoring addr:
// the transport derives addr from the same URL, and dialling what was
// checked rather than what is asked leaves nothing to get out of step.
func (s *Server) dialForward(ctx context.Context, _, _ string) (net.Conn, error) {
	d, ok := ctx.Value(forwardKey{}).(forwardDest)
	if !ok {
		return nil, errors.New("egress: a forwarded request without a checked destination")
	}
	c, err := s.dialer.dial(ctx, d.target, d.private)
	if err != nil {
		return nil, err
	}
	return newIdleConn(c, s.opts.IdleTimeout), nil
}

// forwardError answers a plain-HTTP request that could not be forwarded.
func (s *Server) forwardError(w http.ResponseWriter, r *http.Request, err error) {
	d, _ := r.Context().Value(forwardKey{}).(forwardDest)
	switch {
	case errors.Is(err, ErrNonPublicAddress):
		s.refuse(w, r, d.conv, d.target, reasonNonPublic, err)
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; there is no one to answer.
		s.logger.Debug("egress: client left during a forwarded request", "conversation", d.conv, "host", d.target.host, "port", d.target.port)
	default:
		s.failUpstream(w, r, d.conv, d.target, err)
	}
}

// idleWriter gives each write to the client the idle timeout, so a client
// that stops reading a response cannot hold the request (and its slot).
type idleWriter struct {
	http.ResponseWriter
	rc   *http.ResponseController
	idle time.Duration
}

func (w *idleWriter) Write(p []byte) (int, error) {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.idle))
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the server's writer (to flush).
func (w *idleWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// idleBody gives each read of the request body the idle timeout, and lifts
// it when the body ends: net/http then reads the connection in the
// background, and a deadline left behind would cancel the request.
type idleBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	idle time.Duration
}

func (b *idleBody) Read(p []byte) (int, error) {
	_ = b.rc.SetReadDeadline(time.Now().Add(b.idle))
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// idleConn is a destination connection on which a read fails only when no
// byte has moved either way for idle (the transport reads for the answer
// while it is still sending a long request body), and a write when it
// cannot move a byte for idle.
type idleConn struct {
	net.Conn
	idle time.Duration
	last atomic.Int64 // unix nanoseconds of the last byte moved either way
}

func newIdleConn(c net.Conn, idle time.Duration) *idleConn {
	ic := &idleConn{Conn: c, idle: idle}
	ic.last.Store(time.Now().UnixNano())
	return ic
}

func (c *idleConn) Read(p []byte) (int, error) {
	for {
		_ = c.Conn.SetReadDeadline(time.Unix(0, c.last.Load()).Add(c.idle))
		n, err := c.Conn.Read(p)
		if n > 0 {
			c.last.Store(time.Now().UnixNano())
		}
		if n == 0 && isTimeout(err) && time.Since(time.Unix(0, c.last.Load())) < c.idle {
			continue
		}
		return n, err
	}
}

func (c *idleConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.last.Store(time.Now().UnixNano())
	}
	return n, err
}
