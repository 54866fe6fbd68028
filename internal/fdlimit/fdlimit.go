// Package fdlimit raises the process's file-descriptor limit to what the
// system allows, and keeps a listener within it: connections beyond a
// bound are answered 503 and closed at once, so that accept(2) never runs
// into EMFILE while the process still has work it can finish.
package fdlimit

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Raise raises the soft RLIMIT_NOFILE to the hard limit and returns the
// limit now in force. A long-running role calls it once at start: the soft
// limit of a login shell or a container runtime (often 1,024, sometimes
// 20,000) is a default for interactive programs, and a server that holds
// a connection per browser stream reaches it long before the hard limit,
// which is the ceiling the administrator set. On failure it returns the
// unchanged soft limit with the error.
func Raise() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, fmt.Errorf("fdlimit: getrlimit: %w", err)
	}
	if l.Cur >= l.Max {
		return l.Cur, nil
	}
	want := l
	want.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		return l.Cur, fmt.Errorf("fdlimit: setrlimit to %d: %w", l.Max, err)
	}
	return want.Cur, nil
}

// Current returns the soft RLIMIT_NOFILE: the number of descriptors this
// process may hold.
func Current() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, fmt.Errorf("fdlimit: getrlimit: %w", err)
	}
	return l.Cur, nil
}

// Reserve is how many descriptors a process keeps for what is not a
// client connection (its store, its logs, connections to workers and the
// model, the listener's own accept) when it derives its connection and
// stream bounds from its limit: a quarter of a small limit, 1,024 of a
// large one.
func Reserve(limit uint64) uint64 {
	return min(limit/4, 1024)
}

// MaxConns is the bound on open client connections a server with the
// descriptor limit limit keeps (Listen): the limit less Reserve.
func MaxConns(limit uint64) int {
	return int(min(limit-Reserve(limit), 1<<30))
}

// shedResponse is what a connection beyond the bound is told before it is
// closed, in the JSON error shape of every TalkIDE API (contract.Error).
var shedResponse = func() []byte {
	body := `{"error":{"code":"unavailable","message":"the server has too many open connections; retry in a second"}}` + "\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\n" +
		"Content-Type: application/json\r\n" +
		"Retry-After: 1\r\n" +
		"Connection: close\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}()

// Listener bounds the connections accepted from a net.Listener that are
// open at once. Construct it with Listen.
type Listener struct {
	net.Listener
	max  int
	open atomic.Int64
	shed atomic.Int64
	// OnShed, when set before the first Accept, is called for each
	// connection refused (a metric).
	OnShed func()
}

// Listen wraps ln so that at most max accepted connections are open at
// once. A connection beyond that is accepted, told 503 (best effort, with
// a deadline of 100 ms) and closed: its descriptor is back at once, the
// client learns why, and accept keeps draining the backlog instead of
// leaving it to time out. max <= 0 means no bound.
func Listen(ln net.Listener, max int) *Listener {
	return &Listener{Listener: ln, max: max}
}

// Open returns the accepted connections open now.
func (l *Listener) Open() int { return int(l.open.Load()) }

// Shed returns the connections refused so far.
func (l *Listener) Shed() int64 { return l.shed.Load() }

// Accept returns the next connection within the bound.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.max > 0 && l.open.Load() >= int64(l.max) {
			l.shed.Add(1)
			if l.OnShed != nil {
				l.OnShed()
			}
			c.SetDeadline(time.Now().Add(100 * time.Millisecond))
			c.Write(shedResponse)
			c.Close()
			continue
		}
		l.open.Add(1)
		return &conn{Conn: c, l: l}, nil
	}
}

// conn gives its slot back once, when it is closed.
type conn struct {
	net.Conn
	l    *Listener
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

// NetConn is the connection beneath, as tls.Conn's is: the gateway finds
// its own wrapper of the connection through it.
func (c *conn) NetConn() net.Conn { return c.Conn }

// CloseWrite ends the sending side, as *net.TCPConn's does: a server that
// closes a connection with a request's body unread shuts its side first
// and reads on for a moment, so that the client gets the answer rather
// than a reset, and it finds CloseWrite through this wrapper.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
