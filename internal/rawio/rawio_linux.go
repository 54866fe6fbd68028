package rawio

import (
	"errors"
	"io"
	"iter"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Wrap returns c with raw reads and writes when c is a TCP or Unix socket
// on Linux, and c itself otherwise.
func Wrap(c net.Conn) net.Conn {
	switch c.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		return c
	}
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return c
	}
	r := &conn{Conn: c, rc: rc}
	r.readFn, r.writeFn = r.read, r.write
	r.heldFn, r.heldSeqFn = r.heldRead, r.heldSeq
	return r
}

// conn is a socket read and written with raw system calls. Its Read and
// Write may each be called concurrently, as net.Conn's.
type conn struct {
	net.Conn
	rc syscall.RawConn

	// The read and the write in progress, for readFn and writeFn (method
	// values made once: a closure per call would be an allocation per
	// event).
	rmu    sync.Mutex
	rp     []byte
	rn     int
	rerr   syscall.Errno
	readFn func(fd uintptr) bool

	wmu     sync.Mutex
	wp      []byte
	wn      int
	werr    syscall.Errno
	writeFn func(fd uintptr) bool

	// The held read (Hold). hold, next and stop are guarded by rmu; yield,
	// wait and herr belong to the coroutine, which runs only while a
	// Read holding rmu resumes it.
	hold      bool
	next      func() (struct{}, bool) // resumes the coroutine; nil when none runs
	stop      func()
	yield     func(struct{}) bool
	wait      bool  // the last read was short: wait in the poller before the next
	herr      error // RawConn.Read's own error, once it has returned
	heldFn    func(fd uintptr) bool
	heldSeqFn func(yield func(struct{}) bool)

	held    atomic.Bool  // a coroutine runs or is being started: Close must end it
	closing atomic.Bool  // Close has begun
	rdl     atomic.Int64 // the caller's read deadline in Unix nanoseconds; 0 for none

	// The probe's deadline (armProbe) in Unix nanoseconds while it is the
	// one on the descriptor, 0 while the caller's (rdl) is.
	dmu sync.Mutex
	pdl int64
}

func (c *conn) read(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rp[0])), uintptr(len(c.rp)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait until readable, then try again
		}
		c.rn, c.rerr = int(n), e
		return true
	}
}

func (c *conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.hold {
		return c.readHeld(p)
	}
	return c.readPlain(p)
}

// readPlain is Read not held, with rmu held.
func (c *conn) readPlain(p []byte) (int, error) {
	c.rp, c.rn, c.rerr = p, 0, 0
	err := c.rc.Read(c.readFn)
	c.rp = nil
	switch {
	case err != nil: // from the poller: a deadline passed, or the socket closed
		return 0, c.opError("read", err)
	case c.rerr != 0:
		return 0, c.opError("read", c.rerr)
	case c.rn == 0:
		return 0, io.EOF
	}
	return c.rn, nil
}

func (c *conn) write(fd uintptr) bool {
	for len(c.wp) > 0 {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&c.wp[0])), uintptr(len(c.wp)))
		switch e {
		case 0:
			c.wn += int(n)
			c.wp = c.wp[n:]
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // wait until writable, then write the rest
		default:
			c.werr = e
			return true
		}
	}
	return true
}

func (c *conn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wp, c.wn, c.werr = p, 0, 0
	err := c.rc.Write(c.writeFn)
	c.wp = nil
	switch {
	case err != nil:
		return c.wn, c.opError("write", err)
	case c.werr != 0:
		return c.wn, c.opError("write", c.werr)
	}
	return c.wn, nil
}

// Hold makes c's reads, from the next one until Release or Close, parts
// of one RawConn.Read held open, when c is a connection Wrap made raw; it
// does nothing otherwise.
//
// The runtime's poller forgets that a socket is readable whenever a read
// begins, so after a read that returned data the next read must make a
// system call that fails with EAGAIN before it may wait: a proxy that
// relays a stream of small events makes two reads per event, one of them
// empty. Held, the read function hands each read's bytes to the caller
// from a coroutine instead of returning, so nothing is forgotten, and
// after a read shorter than its buffer it waits for the poller before it
// reads again, as nginx does. A TCP or Unix stream read stops short only
// when the socket has nothing more queued; bytes that arrive later wake
// the poller anew.
//
// While the coroutine runs it holds the descriptor's read lock, so
// nothing else may read c's descriptor directly (a peek through
// SyscallConn would wait for Release); Release before handing c to
// anyone who might.
func Hold(c net.Conn) {
	if r, ok := c.(*conn); ok {
		r.rmu.Lock()
		r.hold = true
		r.rmu.Unlock()
	}
}

// Release ends what Hold began: c's reads are plain again, and the
// coroutine of a held read, if one runs, has ended. It waits for a Read in
// progress on c.
func Release(c net.Conn) {
	if r, ok := c.(*conn); ok {
		r.rmu.Lock()
		r.hold = false
		r.endHeld()
		r.rmu.Unlock()
	}
}

// endHeld stops the coroutine, with rmu held, and gives the descriptor
// back the caller's deadline if the probe's is on it.
func (c *conn) endHeld() {
	if c.stop != nil {
		c.stop()
		c.next, c.stop = nil, nil
	}
	c.held.Store(false)
	c.dmu.Lock()
	if c.pdl != 0 {
		c.Conn.SetReadDeadline(fromUnixNano(c.rdl.Load()))
		c.pdl = 0
	}
	c.dmu.Unlock()
}

// probeAfter bounds a held read's wait after a short read.
//
// A read stops short when the socket has nothing more queued, and the
// poller wakes for whatever comes later. The one thing it does not wake
// for again is an end (a FIN, or a reset) that came with the last bytes,
// before they were read: the wake-up that brought the bytes brought the
// end too, and a plain read after them would return it at once, where a
// held read would wait for good. nginx knows of such an end from epoll's
// EPOLLRDHUP; Go's poller does not say. So the held read waits under a
// deadline of its own, no later than probeAfter, and when that passes
// with the caller's own deadline still ahead, a plain read finds what is
// there (bytes, nothing, the end or an error) and waits as net's does.
// An upstream that goes away with a response unfinished is noticed
// within probeAfter, and a stream that pauses for longer costs one read
// more per pause. The deadline is set again only when less than half of
// probeAfter is left, so a stream's events do not each pay for it.
const probeAfter = 500 * time.Millisecond

// armProbe puts the probe's deadline on the descriptor, unless the
// caller's comes sooner or the probe's is far enough ahead.
func (c *conn) armProbe() {
	now := time.Now().UnixNano()
	c.dmu.Lock()
	arm := c.pdl-now < int64(probeAfter/2) // the probe's, near or past
	if c.pdl == 0 {
		d := c.rdl.Load()
		arm = d == 0 || d > now+int64(probeAfter) // the caller's, none or later
	}
	if arm {
		c.pdl = now + int64(probeAfter)
		c.Conn.SetReadDeadline(time.Unix(0, c.pdl))
	}
	c.dmu.Unlock()
}

// deadlinePassed says whether the caller's read deadline has passed.
func (c *conn) deadlinePassed() bool {
	d := c.rdl.Load()
	return d != 0 && time.Now().UnixNano() >= d
}

// heldSeq is the coroutine: one RawConn.Read, which heldRead keeps open.
func (c *conn) heldSeq(yield func(struct{}) bool) {
	c.yield, c.wait = yield, false
	c.herr = c.rc.Read(c.heldFn)
	c.yield = nil
}

// heldRead is the held RawConn.Read's function. It returns true only to
// end the held read: at EOF, on an error, or when the coroutine is
// stopped.
func (c *conn) heldRead(fd uintptr) bool {
	for {
		if c.wait {
			c.wait = false
			c.armProbe()
			return false // wait until readable, without forgetting what the poller saw
		}
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rp[0])), uintptr(len(c.rp)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.rn, c.rerr = int(n), e
		if e != 0 || n == 0 {
			return true
		}
		c.wait = int(n) < len(c.rp)
		if !c.yield(struct{}{}) {
			return true
		}
		// Resumed by the next Read, with its buffer in c.rp.
	}
}

// readHeld is Read while c is held, with rmu held.
func (c *conn) readHeld(p []byte) (int, error) {
	if c.closing.Load() {
		return 0, c.opError("read", net.ErrClosed)
	}
	// Between reads the coroutine is not waiting in the poller, which is
	// where a deadline is checked; a read after its deadline fails as
	// net's does, even with bytes waiting.
	if c.deadlinePassed() {
		return 0, c.opError("read", os.ErrDeadlineExceeded)
	}
	if c.next == nil {
		// Close looks at held after it sets closing: one of the two sees
		// the other, so no coroutine starts that Close would not end.
		c.held.Store(true)
		if c.closing.Load() {
			c.held.Store(false)
			return 0, c.opError("read", net.ErrClosed)
		}
		c.herr = nil
		c.next, c.stop = iter.Pull(c.heldSeqFn)
	}
	c.rp, c.rn, c.rerr = p, 0, 0
	_, ok := c.next()
	c.rp = nil
	if ok {
		return c.rn, nil
	}
	// The held read has ended; the next Read starts another.
	herr := c.herr
	c.endHeld()
	switch {
	case c.closing.Load():
		return 0, c.opError("read", net.ErrClosed)
	case errors.Is(herr, os.ErrDeadlineExceeded) && !c.deadlinePassed():
		// The probe's deadline, now the caller's again (endHeld).
		return c.readPlain(p)
	case herr != nil: // from the poller: a deadline passed, or the socket closed
		return 0, c.opError("read", herr)
	case c.rerr != 0:
		return 0, c.opError("read", c.rerr)
	}
	return 0, io.EOF
}

// Close ends a held read's coroutine, which holds the descriptor's read
// lock and would keep the descriptor's close waiting, and then closes c.
func (c *conn) Close() error {
	c.closing.Store(true)
	if c.held.Load() {
		// A Read waiting in the poller holds rmu; a deadline in the past
		// sends it back.
		c.dmu.Lock()
		c.rdl.Store(1) // long past: armProbe leaves it on the descriptor
		c.pdl = 0
		c.Conn.SetReadDeadline(time.Unix(1, 0))
		c.dmu.Unlock()
		c.rmu.Lock()
		c.endHeld()
		c.rmu.Unlock()
	}
	return c.Conn.Close()
}

// SetDeadline and SetReadDeadline keep the read deadline for readHeld,
// and replace the probe's on the descriptor.
func (c *conn) SetDeadline(t time.Time) error {
	return c.setReadDeadline(t, c.Conn.SetDeadline)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	return c.setReadDeadline(t, c.Conn.SetReadDeadline)
}

func (c *conn) setReadDeadline(t time.Time, set func(time.Time) error) error {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.rdl.Store(unixNano(t))
	c.pdl = 0
	return set(t)
}

func fromUnixNano(d int64) time.Time {
	if d == 0 {
		return time.Time{}
	}
	return time.Unix(0, d)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	if n := t.UnixNano(); n > 0 {
		return n
	}
	return 1 // long past
}

// opError is the error net's Read and Write return for err: an errno
// inside an *os.SyscallError, so that errors.Is(err, syscall.ECONNRESET)
// and the like hold as they did.
func (c *conn) opError(op string, err error) error {
	if e, ok := err.(syscall.Errno); ok {
		err = os.NewSyscallError(op, e)
	}
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// CloseWrite shuts the sending side down, as *net.TCPConn's does (the
// HTTP server uses it to end a connection gracefully).
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
