package rawio

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pair returns a wrapped client connection and the server's end, plain.
func pair(t *testing.T) (wrapped net.Conn, peer net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer = <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	wrapped = Wrap(c)
	t.Cleanup(func() { wrapped.Close(); peer.Close() })
	return wrapped, peer
}

// TestLargeTransfer writes more than the socket buffers hold to a reader
// that is slow to start, so that writes meet EAGAIN and wait, and reads
// it back the other way: every byte arrives, in order.
func TestLargeTransfer(t *testing.T) {
	c, peer := pair(t)
	raw(t, c)
	data := make([]byte, 16<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	want := sha256.Sum256(data)
	got := make(chan [32]byte, 1)
	go func() {
		time.Sleep(100 * time.Millisecond) // the writer fills the buffers first
		h := sha256.New()
		io.Copy(h, peer)
		var s [32]byte
		copy(s[:], h.Sum(nil))
		got <- s
	}()
	n, err := c.Write(data)
	if err != nil || n != len(data) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	c.(interface{ CloseWrite() error }).CloseWrite()
	if s := <-got; s != want {
		t.Fatal("the peer read other bytes than were written")
	}

	// The other way, read in small pieces, then EOF.
	go func() {
		peer.Write(data)
		peer.Close()
	}()
	if !bytes.Equal(readHash(t, c, 1000), want[:]) {
		t.Fatal("read other bytes than the peer wrote")
	}
}

// readHash reads c to its EOF, in reads of the given sizes in turn, and
// returns the SHA-256 of what it read.
func readHash(t *testing.T, c net.Conn, sizes ...int) []byte {
	t.Helper()
	h := sha256.New()
	for i := 0; ; i++ {
		buf := make([]byte, sizes[i%len(sizes)])
		n, err := c.Read(buf)
		h.Write(buf[:n])
		if err == io.EOF {
			return h.Sum(nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestConcurrentWrites: each Write's bytes stay together when many
// goroutines write at once, as with net.Conn.
func TestConcurrentWrites(t *testing.T) {
	c, peer := pair(t)
	raw(t, c)
	const writers, each, size = 8, 50, 64 << 10
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			msg := bytes.Repeat([]byte{byte('a' + w)}, size)
			for range each {
				if _, err := c.Write(msg); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, size)
		for range writers * each {
			if _, err := io.ReadFull(peer, buf); err != nil {
				done <- err
				return
			}
			if bytes.Count(buf, buf[:1]) != size {
				done <- errors.New("two writes interleaved")
				return
			}
		}
		done <- nil
	}()
	wg.Wait()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestDeadlineAndClose: a read waits on the poller, so a deadline ends it
// with a timeout, and Close ends a read in progress with net.ErrClosed.
func TestDeadlineAndClose(t *testing.T) {
	c, _ := pair(t)
	raw(t, c)
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := c.Read(make([]byte, 10))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}
	c.SetReadDeadline(time.Time{})
	res := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 10))
		res <- err
	}()
	time.Sleep(50 * time.Millisecond)
	c.Close()
	select {
	case err := <-res:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read on a closed connection: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the read")
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write on a closed connection: %v, want net.ErrClosed", err)
	}
}

// TestReset: a reset by the peer is the errno it was, as net reports it,
// whether the read is plain or held.
func TestReset(t *testing.T) {
	for _, held := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "held"}[held], func(t *testing.T) {
			c, peer := pair(t)
			raw(t, c)
			if held {
				Hold(c)
			}
			peer.(*net.TCPConn).SetLinger(0)
			peer.Close()
			time.Sleep(50 * time.Millisecond)
			_, err := c.Read(make([]byte, 10))
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("read after a reset: %v, want ECONNRESET", err)
			}
			var oe *net.OpError
			if !errors.As(err, &oe) || oe.Op != "read" {
				t.Fatalf("read error %#v is not a *net.OpError of a read", err)
			}
		})
	}
}

// TestWrapAndListen: only sockets are wrapped, and a listener wraps what
// it accepts.
func TestWrapAndListen(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Wrap(a) != a {
		t.Error("a pipe was wrapped")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := Listen(l)
	defer rl.Close()
	go func() {
		if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
			c.Write([]byte("hello"))
			c.Close()
		}
	}()
	c, err := rl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw(t, c)
	if b, err := io.ReadAll(c); err != nil || string(b) != "hello" {
		t.Fatalf("read %q, %v", b, err)
	}
}
