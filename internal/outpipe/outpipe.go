// Package outpipe is the pipe a command's output is read from. The reader
// reads until the command's processes have closed the pipe; when something
// keeps it open after the command has ended (a process that left the tree
// without a sandbox, a sandbox's helper slow to exit on a loaded machine),
// Finish stops the wait for more after Grace, and what the pipe already
// holds is still read: a reader that fell behind the command (a slow
// stream) loses nothing the command wrote, where a read past a deadline
// would have dropped up to a pipe's worth of its end.
package outpipe

import (
	"errors"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Grace is how long Finish waits for the pipe to close once the command
// has ended.
const Grace = 500 * time.Millisecond

// maxDrain bounds what is read once Grace has passed: as much as a pipe
// holds at most (Linux's default pipe-max-size), all that the command can
// have written before it ended; more is from a process still writing,
// which the grace cuts off.
const maxDrain = 1 << 20

// Reader is a pipe's read end.
type Reader struct {
	f    *os.File
	left int // bytes still to be read once Finish has stopped the wait
}

// New returns a new pipe: its read end, and the write end to give the
// command (close it once the command has started).
func New() (*Reader, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	return &Reader{f: r, left: maxDrain}, w, nil
}

// Read reads the pipe, until its end or, once Finish has stopped the
// wait, until it holds nothing more.
func (r *Reader) Read(b []byte) (int, error) {
	n, err := r.f.Read(b)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n > 0 {
		return n, err
	}
	rc, err := r.f.SyscallConn()
	if err != nil || r.left <= 0 {
		return 0, io.EOF
	}
	b = b[:min(len(b), r.left)]
	var rerr error
	// Control ignores the deadline; the pipe is non-blocking, so an empty
	// one answers EAGAIN at once.
	if cerr := rc.Control(func(fd uintptr) { n, rerr = unix.Read(int(fd), b) }); cerr != nil || rerr != nil || n <= 0 {
		return 0, io.EOF
	}
	r.left -= n
	return n, nil
}

// Finish is called once the command has ended. copied is closed when the
// copy reading r has returned: Finish waits up to Grace for it, then stops
// the wait for more (the copy reads what the pipe holds and ends), and
// waits for it.
func (r *Reader) Finish(copied <-chan struct{}) {
	t := time.NewTimer(Grace)
	defer t.Stop()
	select {
	case <-copied:
	case <-t.C:
		r.f.SetReadDeadline(time.Now())
		<-copied
	}
}

// Close closes the read end.
func (r *Reader) Close() error { return r.f.Close() }
