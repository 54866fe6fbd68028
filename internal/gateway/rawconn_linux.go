package gateway

import (
	"io"
	"os"
	"syscall"
	"unsafe"
)

func (c *rawConn) bindOps() {
	c.rd.fn, c.rd.run = c.rd.read, c.rc.Read
	c.wr.fn, c.wr.run = c.wr.write, c.rc.Write
}

// read reads once into p; false asks the poller to wait for data.
func (o *rawOp) read(fd uintptr) bool {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&o.p[0])), uintptr(len(o.p)))
		switch {
		case e == 0:
			o.n = int(r)
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
			return false // wait in the poller, then read again
		default:
			o.err = os.NewSyscallError("read", e)
		}
		return true
	}
}

// write writes all of p; false asks the poller to wait for room.
func (o *rawOp) write(fd uintptr) bool {
	for o.n < len(o.p) {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&o.p[o.n])), uintptr(len(o.p)-o.n))
		switch {
		case e == 0 && r == 0:
			// As net's: a write that takes nothing would loop for good.
			o.err = io.ErrUnexpectedEOF
			return true
		case e == 0:
			o.n += int(r)
		case e == syscall.EINTR:
		case e == syscall.EAGAIN:
			return false // wait until the socket has room
		default:
			o.err = os.NewSyscallError("write", e)
			return true
		}
	}
	return true
}

// do runs o for p under o's lock (a net.Conn may be read, or written, by
// two goroutines at once) and returns its results, leaving no reference
// to p behind.
func (o *rawOp) do(p []byte) (int, error) {
	o.mu.Lock()
	o.p, o.n, o.err = p, 0, nil
	err := o.run(o.fn)
	if err == nil {
		err = o.err
	}
	n := o.n
	o.p, o.err = nil, nil
	o.mu.Unlock()
	return n, err
}

func (c *rawConn) Read(p []byte) (int, error) {
	if !c.raw.Load() {
		return c.Conn.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	n, err := c.rd.do(p)
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *rawConn) Write(p []byte) (int, error) {
	if !c.raw.Load() {
		return c.Conn.Write(p)
	}
	n, err := c.wr.do(p)
	if err != nil {
		return n, c.opError("write", err)
	}
	return n, nil
}
