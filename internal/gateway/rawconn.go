package gateway

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
)

// rawConn is a TCP connection that, while raw, reads and writes its
// socket with system calls the Go runtime does not account for
// (syscall.RawSyscall), still waiting in the runtime's poller when the
// socket has nothing to read or no room to write.
//
// Why: a stream's events come one at a time, tens of milliseconds apart,
// and each is a read from the upstream and a write to the client. Made
// the runtime's way, each of those system calls marks its thread as in a
// system call, and when the process had been idle, that wakes the
// runtime's monitor thread to watch it; at 256 streams of a model's pace
// that thread and its wake-ups were 9 % of the control-plane's CPU
// samples (perf; 1.5 % raw), what nginx, the peer the gateway is measured
// against, does not pay. A read or write of a non-blocking socket returns
// at once, so there is nothing for the monitor to take over.
// docs/gateway.md gives what it saves.
//
// The gateway's upstream connections are raw from their dial; a
// connection of the control-plane's server from the first gateway call
// on it whose worker token verifies, until it closes (Conns, ConnContext,
// Gateway.serve).
// Raw for the rest of its life, not for the call alone: the call's last
// write and the next request's first read, made the runtime's way, woke
// the monitor as before (perf, one stream). A connection that never
// carries a gateway call, a browser's, is read and written as net does.
//
// The race detector sees no order between a raw write and the raw read
// of its bytes, as it does for syscall.Read and syscall.Write; nothing
// here hands memory from one goroutine to another through a socket.
type rawConn struct {
	net.Conn // a *net.TCPConn: closes, deadlines, addresses; reads and writes when not raw
	rc       syscall.RawConn
	raw      atomic.Bool
	rd, wr   rawOp // the raw read's and write's state
}

// rawOp is one direction's raw system call with its arguments and results
// in fields, so that its callback, bound once per connection (bindOps), is
// not a closure made, and allocated, on every read and write: at a
// model's pace that is two reads and a write per event.
type rawOp struct {
	mu  sync.Mutex
	p   []byte
	n   int
	err error
	fn  func(fd uintptr) bool          // the system call, o.read or o.write
	run func(func(uintptr) bool) error // the RawConn's Read or Write, which runs fn
}

// wrap returns c as a rawConn, raw from the start or not, when c is a
// *net.TCPConn; else c itself. Nothing else is wrapped: beneath a wrapper
// that counts, rewrites or encrypts the bytes, raw reads and writes would
// go around it.
func wrap(c net.Conn, raw bool) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	sc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	rc := &rawConn{Conn: tc, rc: sc}
	rc.bindOps()
	rc.raw.Store(raw)
	return rc
}

// opError is the error net would return: net/http tells a timeout or a
// closed connection by it. The RawConn's own errors are *net.OpErrors
// already ("raw-read"), named again here as the read or write they were.
func (c *rawConn) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// ReadFrom copies r to the connection. The Transport's writer hands the
// request body of every upstream call to it; raw, it copies through a
// pooled buffer (io.Copy would allocate one per call, 12 KiB for a
// 16 KiB body), else as *net.TCPConn does.
func (c *rawConn) ReadFrom(r io.Reader) (int64, error) {
	if !c.raw.Load() {
		return c.Conn.(*net.TCPConn).ReadFrom(r)
	}
	buf := copyBuffers.Get()
	defer copyBuffers.Put(buf)
	return io.CopyBuffer(writeOnly{c}, r, buf)
}

// writeOnly hides a connection's ReadFrom from io.CopyBuffer. A pointer
// alone, it is an io.Writer without an allocation.
type writeOnly struct{ c *rawConn }

func (w writeOnly) Write(p []byte) (int, error) { return w.c.Write(p) }

// CloseWrite shuts the sending side, as *net.TCPConn's does: net/http's
// server finds it on its connection before a close with a request's body
// unread.
func (c *rawConn) CloseWrite() error { return c.Conn.(*net.TCPConn).CloseWrite() }

// Conns returns ln with its TCP connections wrapped so that, from the
// first gateway call served on one, it is read and written raw. Set
// ConnContext as the server's ConnContext with it: that is how the call
// finds its connection. Put a listener that wraps the connections again
// (fdlimit's) around this one, not beneath it, with connections that give
// the one beneath by a NetConn method.
func Conns(ln net.Listener) net.Listener { return rawListener{ln} }

type rawListener struct{ net.Listener }

func (l rawListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return wrap(c, false), nil
}

type connKey struct{}

// ConnContext is an http.Server's ConnContext for a listener from Conns.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	for {
		switch cc := c.(type) {
		case *rawConn:
			return context.WithValue(ctx, connKey{}, cc)
		case interface{ NetConn() net.Conn }:
			c = cc.NetConn()
		default:
			return ctx
		}
	}
}

// callConn is the connection a call came on when its listener is from
// Conns; else nil.
func callConn(ctx context.Context) *rawConn {
	rc, _ := ctx.Value(connKey{}).(*rawConn)
	return rc
}
