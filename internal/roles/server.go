package roles

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/talkide/platform/internal/fdlimit"
	"github.com/talkide/platform/internal/gateway"
	"github.com/talkide/platform/internal/lifecycle"
)

// Server is an http.Server on its own listener.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Connections' timeouts: a client has 10 s for a request's headers (the
// control-plane and the worker give it httpapi.DefaultBodyTimeout for its
// body); a keep-alive connection idle for 2 minutes is closed, which
// without an IdleTimeout (or a ReadTimeout, which would cut event streams
// off) would stay open for as long as the client liked.
const (
	headerTimeout = 10 * time.Second
	idleTimeout   = 2 * time.Minute
)

// listen serves h on addr until g stops, which shuts the server down
// (lets the requests being served end until its context is done, then
// closes what is left: an SSE stream never ends on its own). A Serve
// that fails before is g's fatal error.
// With gatewayConns, a gateway call served on one of its connections
// reads and writes it raw from then on (gateway.Conns).
func listen(g *lifecycle.Group, name, addr string, h http.Handler, logger *slog.Logger, gatewayConns bool) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return serve(g, name, ln, h, logger, gatewayConns), nil
}

// serve is listen on a listener already open: a worker among replicas
// needs its port before it can say where it is reached.
func serve(g *lifecycle.Group, name string, ln net.Listener, h http.Handler, logger *slog.Logger, gatewayConns bool) *Server {
	// Connections beyond the open-file limit less a reserve are told 503
	// and closed at once, so that accept never meets EMFILE while the
	// process still has descriptors for the work it has taken on
	// (docs/operations.md).
	if gatewayConns {
		// A worker's connection that carries a gateway call is read and
		// written raw from then on; beneath fdlimit's wrapper, so that
		// its count of open connections still sees every close.
		ln = gateway.Conns(ln)
	}
	if limit, err := fdlimit.Current(); err == nil {
		ln = fdlimit.Listen(ln, fdlimit.MaxConns(limit))
	}
	s := &Server{srv: &http.Server{Handler: h, ReadHeaderTimeout: headerTimeout, IdleTimeout: idleTimeout,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}, ln: ln}
	if gatewayConns {
		s.srv.ConnContext = gateway.ConnContext
	}
	g.Go(name+" server", func(context.Context) error {
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Defer(name+" server", s.shutdown)
	return s
}

// shutdown stops accepting and lets the requests being served end, until
// ctx is done (its grace is over); then it closes what is left.
func (s *Server) shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if graceOver(err) {
		err = s.Close()
	}
	return err
}

// Close closes the listener and every connection at once, as a process
// that dies would; the role's Stop then has nothing left to drain.
func (s *Server) Close() error { return s.srv.Close() }

// URL is the server's base URL.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// graceOver reports whether a server's Shutdown returned because its grace
// period ended with requests still open: by its timeout, or cut short (a
// second Ctrl-C of talkide dev cancels it). Either way the shutdown goes
// on by closing what is left; it is no failure of the role's.
func graceOver(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// afterGrace is the context of a last step that must run even when the
// servers' shutdown used its context up (the last usage records before
// the store closes): 10 s more, whatever ctx says.
func afterGrace(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}
