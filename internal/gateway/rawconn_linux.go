package gateway

import (
	"io"
	"os"
	"syscall"
	"unsafe"
)

func (c *rawConn) Read(p []byte) (int, error) {
	if !c.raw.Load() {
		return c.Conn.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var rerr error
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch {
			case e == 0:
				n = int(r)
			case e == syscall.EINTR:
				continue
			case e == syscall.EAGAIN:
				return false // wait in the poller, then read again
			default:
				rerr = os.NewSyscallError("read", e)
			}
			return true
		}
	})
	if err == nil {
		err = rerr
	}
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
	var nn int
	for nn < len(p) {
		var werr error
		err := c.rc.Write(func(fd uintptr) bool {
			for nn < len(p) {
				r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[nn])), uintptr(len(p)-nn))
				switch {
				case e == 0 && r == 0:
					// As net's: a write that takes nothing would loop for good.
					werr = io.ErrUnexpectedEOF
					return true
				case e == 0:
					nn += int(r)
				case e == syscall.EINTR:
				case e == syscall.EAGAIN:
					return false // wait until the socket has room
				default:
					werr = os.NewSyscallError("write", e)
					return true
				}
			}
			return true
		})
		if err == nil {
			err = werr
		}
		if err != nil {
			return nn, c.opError("write", err)
		}
	}
	return nn, nil
}
