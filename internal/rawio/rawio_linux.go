package rawio

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
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
