//go:build linux

package rawio

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// readCalls is how many read system calls this process has made, from
// /proc/self/io (every thread's; reading the file costs a fixed number).
func readCalls(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no read counts: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "syscr: "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no syscr in /proc/self/io")
	return 0
}

// paced has the peer send events, each once the reader is waiting for it,
// and counts the read system calls the reader makes for them.
func paced(t *testing.T, c, peer net.Conn, events int) (calls int) {
	t.Helper()
	want := make(chan struct{})
	go func() {
		for i := range events {
			if _, ok := <-want; !ok {
				return
			}
			time.Sleep(2 * time.Millisecond) // the reader waits in the poller first
			peer.Write([]byte("data: event " + strconv.Itoa(i) + "\n\n"))
		}
	}()
	defer close(want)
	buf := make([]byte, 4096)
	base := readCalls(t)
	probe := readCalls(t) - base // what reading the counter costs
	base = readCalls(t)
	for i := range events {
		want <- struct{}{}
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if w := "data: event " + strconv.Itoa(i) + "\n\n"; string(buf[:n]) != w {
			t.Fatalf("event %d: read %q, want %q", i, buf[:n], w)
		}
	}
	return readCalls(t) - base - probe
}

// TestHeldReadsOncePerEvent: held, an event that comes while the reader
// waits costs one read; plain, it costs two (the first finds nothing).
// The count is the whole process's, which includes the runtime's own
// reads (its poller's wake-ups), so plain and held take turns and the
// test asks for the difference: about one read per event.
func TestHeldReadsOncePerEvent(t *testing.T) {
	const rounds, events = 5, 20
	c, peer := pair(t)
	raw(t, c)
	plain, held := 0, 0
	for range rounds {
		plain += paced(t, c, peer, events)
		Hold(c)
		held += paced(t, c, peer, events)
		Release(c)
	}
	n := rounds * events
	t.Logf("read system calls for %d events: %d plain, %d held", n, plain, held)
	if saved := plain - held; saved < n/2 {
		t.Errorf("held reads saved %d of %d events' empty reads, want about all", saved, n)
	}
}

// TestHeldLargeTransfer: held reads of every size return every byte in
// order, then EOF, and EOF again.
func TestHeldLargeTransfer(t *testing.T) {
	c, peer := pair(t)
	raw(t, c)
	Hold(c)
	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(i * 13)
	}
	want := sha256.Sum256(data)
	go func() {
		// In pieces with pauses, so that reads are both full and short.
		for off := 0; off < len(data); off += 300 << 10 {
			peer.Write(data[off:min(off+300<<10, len(data))])
			time.Sleep(time.Millisecond)
		}
		peer.Close()
	}()
	if !bytes.Equal(readHash(t, c, 1, 7, 512, 4096, 65536, 1<<20), want[:]) {
		t.Fatal("read other bytes than the peer wrote")
	}
	if n, err := c.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("read after EOF = %d, %v", n, err)
	}
}

// TestHeldDeadline: a deadline holds for a held read whether it waits in
// the poller or has bytes waiting, and a later deadline lets it go on.
func TestHeldDeadline(t *testing.T) {
	c, peer := pair(t)
	raw(t, c)
	Hold(c)
	timeout := func(err error) bool {
		var ne net.Error
		return errors.Is(err, os.ErrDeadlineExceeded) && errors.As(err, &ne) && ne.Timeout()
	}

	// Waiting in the poller.
	c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	if _, err := c.Read(make([]byte, 10)); !timeout(err) {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}

	// A full read leaves the coroutine about to read again at once: bytes
	// waiting do not make a read past its deadline succeed.
	c.SetReadDeadline(time.Time{})
	peer.Write([]byte("0123456789abcdef"))
	buf := make([]byte, 10)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "0123456789" {
		t.Fatalf("read %q, %v", buf, err)
	}
	c.SetDeadline(time.Unix(1, 0))
	if _, err := c.Read(buf); !timeout(err) {
		t.Fatalf("read past its deadline with bytes waiting: %v, want a timeout", err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "abcdef" {
		t.Fatalf("read after the deadline moved: %q, %v", buf[:n], err)
	}

	// After a short read, then a deadline that passes while it waits.
	c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	if _, err := c.Read(buf); !timeout(err) {
		t.Fatalf("read past its deadline after a short read: %v, want a timeout", err)
	}
	c.SetReadDeadline(time.Time{})
	peer.Write([]byte("more"))
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "more" {
		t.Fatalf("read after a timeout: %q, %v", buf[:n], err)
	}
}

// goroutines waits for the number of goroutines to come down to n: an
// ended coroutine's goroutine exits a moment after it yields back.
func goroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, want %d: a coroutine was left behind", runtime.NumGoroutine(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHeldClose: Close ends a held read whether a Read waits in it or it
// waits between Reads, and leaves no coroutine behind.
func TestHeldClose(t *testing.T) {
	base := runtime.NumGoroutine()
	check := func(err error) {
		t.Helper()
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read on a closed connection: %v, want net.ErrClosed", err)
		}
	}
	closed := func(c net.Conn) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- c.Close() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Close: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not return")
		}
	}

	t.Run("between reads", func(t *testing.T) {
		c, peer := pair(t)
		Hold(c)
		peer.Write([]byte("hello"))
		if n, err := c.Read(make([]byte, 10)); n != 5 || err != nil {
			t.Fatalf("Read = %d, %v", n, err)
		}
		closed(c)
		_, err := c.Read(make([]byte, 10))
		check(err)
		peer.Close()
	})
	t.Run("while a read waits", func(t *testing.T) {
		c, peer := pair(t)
		Hold(c)
		res := make(chan error, 1)
		go func() {
			_, err := c.Read(make([]byte, 10))
			res <- err
		}()
		time.Sleep(30 * time.Millisecond)
		closed(c)
		select {
		case err := <-res:
			check(err)
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not end the read")
		}
		peer.Close()
	})
	t.Run("before the first read", func(t *testing.T) {
		c, peer := pair(t)
		Hold(c)
		closed(c)
		_, err := c.Read(make([]byte, 10))
		check(err)
		peer.Close()
	})
	goroutines(t, base)
}

// TestHeldCloseRace: Reads and a Close at once, many times, under the
// race detector in CI; every Read ends, and so does Close.
func TestHeldCloseRace(t *testing.T) {
	base := runtime.NumGoroutine()
	for i := range 200 {
		c, peer := pair(t)
		Hold(c)
		go func() {
			for range 5 {
				if _, err := peer.Write([]byte("x")); err != nil {
					return
				}
			}
		}()
		var wg sync.WaitGroup
		wg.Go(func() {
			buf := make([]byte, 1)
			for {
				if _, err := c.Read(buf); err != nil {
					return
				}
			}
		})
		if i%2 == 0 {
			time.Sleep(time.Duration(i%7) * 100 * time.Microsecond)
		}
		c.Close()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: a Read did not end after Close", i)
		}
		peer.Close()
	}
	goroutines(t, base)
}

// TestHeldRelease: after Release the descriptor can be read directly (the
// pool's peek) and reads are plain again, with no coroutine left.
func TestHeldRelease(t *testing.T) {
	c, peer := pair(t)
	raw(t, c)
	base := runtime.NumGoroutine()
	Hold(c)
	peer.Write([]byte("one"))
	buf := make([]byte, 10)
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "one" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	Release(c)
	goroutines(t, base)

	rc, err := c.(*conn).Conn.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	peeked := make(chan error, 1)
	go func() {
		peeked <- rc.Read(func(fd uintptr) bool {
			var b [1]byte
			syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			return true
		})
	}()
	select {
	case err := <-peeked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a direct read waited: the held read's lock was kept")
	}

	peer.Write([]byte("two"))
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "two" {
		t.Fatalf("plain read after Release: %q, %v", buf[:n], err)
	}
	// Held again, for the next response.
	Hold(c)
	peer.Write([]byte("three"))
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "three" {
		t.Fatalf("held again: %q, %v", buf[:n], err)
	}
	Release(c)
	goroutines(t, base)
}

// BenchmarkHeldStartStop is what a held read adds to a call: its
// coroutine started with the first read and stopped by Release.
func BenchmarkHeldStartStop(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		p, err := l.Accept()
		if err != nil {
			return
		}
		defer p.Close()
		msg := []byte("x")
		buf := make([]byte, 1)
		for {
			if _, err := p.Read(buf); err != nil {
				return
			}
			p.Write(msg)
		}
	}()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	c := Wrap(nc)
	defer c.Close()
	buf := make([]byte, 16)
	for _, held := range []bool{false, true} {
		name := "plain"
		if held {
			name = "held"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if held {
					Hold(c)
				}
				c.Write([]byte("?"))
				if _, err := c.Read(buf); err != nil {
					b.Fatal(err)
				}
				if held {
					Release(c)
				}
			}
		})
	}
}

// TestHeldEndAfterData: an end (a FIN, or a reset) that came with the
// last bytes, before they were read, ends the next read within
// probeAfter, with EOF or the reset's errno, where the poller alone would
// never wake the held read again.
func TestHeldEndAfterData(t *testing.T) {
	for _, rst := range []bool{false, true} {
		t.Run(map[bool]string{false: "fin", true: "reset"}[rst], func(t *testing.T) {
			c, peer := pair(t)
			raw(t, c)
			Hold(c)
			peer.Write([]byte("last"))
			if rst {
				peer.(*net.TCPConn).SetLinger(0)
			}
			peer.Close()
			time.Sleep(50 * time.Millisecond) // the end arrives before the read
			buf := make([]byte, 64)
			if n, err := c.Read(buf); err != nil || string(buf[:n]) != "last" {
				t.Fatalf("first read: %q, %v", buf[:n], err)
			}
			res := make(chan error, 1)
			go func() {
				_, err := c.Read(buf)
				res <- err
			}()
			select {
			case err := <-res:
				if rst && !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("read after a reset: %v, want ECONNRESET", err)
				}
				if !rst && err != io.EOF {
					t.Fatalf("read after a FIN: %v, want EOF", err)
				}
			case <-time.After(10 * probeAfter):
				t.Fatal("the held read waited on past the end")
			}
		})
	}
}

// TestHeldPause: a stream that pauses for longer than probeAfter goes on
// (the probe's read finds nothing and waits), and neither the probe's
// deadline nor the caller's is lost: after Release, a read that waits
// longer than probeAfter is not cut short, and a caller's deadline set
// before still holds.
func TestHeldPause(t *testing.T) {
	c, peer := pair(t)
	raw(t, c)
	Hold(c)
	buf := make([]byte, 64)
	for _, msg := range []string{"one", "two", "three"} {
		go func() {
			time.Sleep(probeAfter + probeAfter/2)
			peer.Write([]byte(msg))
		}()
		if n, err := c.Read(buf); err != nil || string(buf[:n]) != msg {
			t.Fatalf("read after a pause: %q, %v, want %q", buf[:n], err, msg)
		}
	}
	// Two events close together: the second read waits under the probe's
	// deadline, which is still on the descriptor at Release.
	peer.Write([]byte("a"))
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "a" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	time.AfterFunc(10*time.Millisecond, func() { peer.Write([]byte("b")) })
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "b" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if c.(*conn).pdl == 0 {
		t.Fatal("the probe's deadline is not on the descriptor")
	}
	Release(c)
	go func() {
		time.Sleep(probeAfter + probeAfter/2)
		peer.Write([]byte("plain"))
	}()
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "plain" {
		t.Fatalf("plain read after Release: %q, %v", buf[:n], err)
	}

	// The caller's deadline, a little later than the probe's, holds.
	Hold(c)
	peer.Write([]byte("x"))
	if _, err := c.Read(buf); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.SetReadDeadline(start.Add(probeAfter + probeAfter/2))
	_, err := c.Read(buf)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the caller's deadline: %v, want a timeout", err)
	}
	if d := time.Since(start); d < probeAfter+probeAfter/2 {
		t.Fatalf("the read timed out after %v, before the caller's deadline", d)
	}
}
