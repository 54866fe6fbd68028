package egress

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// serveConnect opens a tunnel to the CONNECT request's authority.
func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request, conv string) {
	// net/http puts a CONNECT's authority in URL.Host; a CONNECT with a
	// path is its own extension, which no proxy client sends.
	if r.URL.Path != "" || r.URL.Host == "" {
		s.badTarget(w, r, conv, "CONNECT needs host:port")
		return
	}
	t, rl, release := s.admit(w, r, conv, true)
	if rl == nil {
		return
	}
	upstream, err := s.dialer.dial(r.Context(), t, rl.private)
	if err != nil {
		release()
		if errors.Is(err, ErrNonPublicAddress) {
			s.refuse(w, r, conv, t, reasonNonPublic, err)
			return
		}
		s.failUpstream(w, r, conv, t, err)
		return
	}
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		release()
		upstream.Close()
		s.logger.Error("egress: cannot take over the connection for a tunnel", "conversation", conv, "err", err)
		http.Error(w, "talkide egress proxy: cannot open a tunnel on this connection", http.StatusInternalServerError)
		return
	}
	tn := &tunnel{client: client, upstream: upstream, idle: s.opts.IdleTimeout}
	if !s.register(tn) {
		release()
		client.Close()
		upstream.Close()
		return
	}
	s.stats.tunnels.Add(1)
	s.stats.openTunnels.Add(1)
	start := time.Now()
	_ = client.SetDeadline(time.Time{}) // the tunnel sets its own
	_ = client.SetWriteDeadline(time.Now().Add(s.opts.IdleTimeout))
	_, err = io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n")
	if err == nil && brw.Reader.Buffered() > 0 {
		// Bytes the client sent after its CONNECT without waiting for the
		// answer (a TLS ClientHello, typically) were read with the request.
		pending, _ := brw.Reader.Peek(brw.Reader.Buffered())
		_ = upstream.SetWriteDeadline(time.Now().Add(s.opts.IdleTimeout))
		var n int
		n, err = upstream.Write(pending)
		s.stats.bytesUp.Add(uint64(n))
	}
	if err == nil {
		tn.run(&s.stats.bytesUp, &s.stats.bytesDown)
	}
	// The slot is free before the client sees the tunnel close, so a
	// client that waits for the close may open another at once.
	s.unregister(tn)
	s.stats.openTunnels.Add(-1)
	release()
	client.Close()
	upstream.Close()
	s.tunnelsWG.Done()
	s.logger.Debug("egress: tunnel closed", "conversation", conv, "host", t.host, "port", t.port,
		"bytes_up", tn.up.Load(), "bytes_down", tn.down.Load(), "duration", time.Since(start).Round(time.Millisecond))
}

func (s *Server) badTarget(w http.ResponseWriter, r *http.Request, conv, msg string) {
	s.stats.bad.Add(1)
	s.logRefusal(r.Context(), conv, target{}, reasonUnusableName, slog.LevelDebug, "detail", msg)
	http.Error(w, "talkide egress proxy: "+msg, http.StatusBadRequest)
}

// register adds tn to the open tunnels, or refuses it once Shutdown has
// begun. A registered tunnel must be unregistered and tunnelsWG.Done called.
func (s *Server) register(tn *tunnel) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.tunnels[tn] = struct{}{}
	s.tunnelsWG.Add(1)
	return true
}

func (s *Server) unregister(tn *tunnel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tunnels, tn)
}

// tunnel copies bytes both ways between a client and a destination until
// both directions have ended, either side fails, nothing has moved either
// way for idle, or it is aborted.
type tunnel struct {
	client, upstream net.Conn
	idle             time.Duration

	last      atomic.Int64 // unix nanoseconds of the last byte moved in either direction
	up, down  atomic.Uint64
	abortOnce sync.Once
	remaining atomic.Int32 // directions still copying
}

// abort ends the tunnel at once, from any goroutine: closing both
// connections unblocks both directions.
func (t *tunnel) abort() {
	t.abortOnce.Do(func() {
		t.client.Close()
		t.upstream.Close()
	})
}

func (t *tunnel) touch() { t.last.Store(time.Now().UnixNano()) }

// run copies until the tunnel ends; the caller's goroutine copies client to
// upstream and a second one, which run waits for, the other way.
func (t *tunnel) run(upTotal, downTotal *atomic.Uint64) {
	t.touch()
	t.remaining.Store(2)
	var wg sync.WaitGroup
	wg.Go(func() { t.pipe(t.client, t.upstream, &t.down, downTotal) })
	t.pipe(t.upstream, t.client, &t.up, upTotal)
	wg.Wait()
}

// pipe copies src to dst. When src ends cleanly and the other direction
// still runs, dst is half-closed so the far side sees the end too (a client
// that sends its request and then shuts down writing still gets the answer).
// When both directions are idle, each ends by itself within the same idle
// timeout, and the last one leaves the closing to the caller. Anything else
// aborts the tunnel.
func (t *tunnel) pipe(dst, src net.Conn, n, total *atomic.Uint64) {
	err := t.copy(dst, src, n, total)
	last := t.remaining.Add(-1) == 0
	switch {
	case err == nil && !last:
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			return
		}
		t.abort()
	case err == nil:
	case isTimeout(err) && t.idleFor() >= t.idle:
	default:
		// A failure, an abort under way, or a write that could not move a
		// byte for idle while the other direction is busy.
		t.abort()
	}
}

// copy copies src to dst until src ends (nil) or an error, a read timeout
// with nothing moved either way for idle, or a write that makes no progress
// for idle.
func (t *tunnel) copy(dst, src net.Conn, n, total *atomic.Uint64) error {
	buf := make([]byte, 32<<10)
	for {
		// The deadline runs from the last byte moved either way: a download
		// with nothing to send upstream is not idle.
		_ = src.SetReadDeadline(time.Unix(0, t.last.Load()).Add(t.idle))
		k, err := src.Read(buf)
		if k > 0 {
			t.touch()
			_ = dst.SetWriteDeadline(time.Now().Add(t.idle))
			w, werr := dst.Write(buf[:k])
			n.Add(uint64(w))
			total.Add(uint64(w))
			if werr != nil {
				return werr
			}
			t.touch()
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			return nil
		case isTimeout(err) && t.idleFor() < t.idle:
			// the other direction moved meanwhile
		default:
			return err
		}
	}
}

// idleFor is how long no byte has moved either way.
func (t *tunnel) idleFor() time.Duration { return time.Since(time.Unix(0, t.last.Load())) }
