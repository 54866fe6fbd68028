// Package headlimit bounds what a buffered reader may take from a
// connection while an HTTP message's head is read, and lets the body
// through unbounded. The bound sits under the bufio.Reader, not over it:
// http.ReadRequest and http.ReadResponse read the head through the
// buffer, and only the reads that refill it reach the connection.
package headlimit

import "io"

// Reader passes reads of R through: at most Left bytes in all while Left
// is not negative, and then Err; any number while Left is negative.
type Reader struct {
	R    io.Reader
	Left int64
	Err  error
}

func (l *Reader) Read(p []byte) (int, error) {
	if l.Left < 0 {
		return l.R.Read(p)
	}
	if l.Left == 0 {
		return 0, l.Err
	}
	if int64(len(p)) > l.Left {
		p = p[:l.Left]
	}
	n, err := l.R.Read(p)
	l.Left -= int64(n)
	return n, err
}
