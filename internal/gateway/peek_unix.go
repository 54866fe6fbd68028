//go:build unix

package gateway

import "syscall"

// peekOpen says whether an idle TCP connection is still open and has
// nothing unread, with one non-blocking peek: no goroutine needs to sit in
// a read on every idle connection to notice that the upstream closed it.
func peekOpen(raw syscall.RawConn) bool {
	open := false
	err := raw.Read(func(fd uintptr) bool {
		n, err := peek(fd)
		// Nothing to read (EAGAIN) is an open connection; EOF (0 bytes),
		// bytes sent unasked or an error are not.
		open = n <= 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
		return true // never wait for the connection to become readable
	})
	return err == nil && open
}
