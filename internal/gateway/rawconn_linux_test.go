package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/nettest"

	"github.com/talkide/platform/internal/fdlimit"
)

// rawPipe is a loopback TCP connection whose two ends are raw: the
// accepted one through Conns, made raw as a gateway call makes it, the
// dialed one through the upstream Transport's dial.
func rawPipe() (c1, c2 net.Conn, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, nil, err
	}
	defer ln.Close()
	rl := Conns(ln)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := rl.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	d, err := newTransport().DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		return nil, nil, nil, err
	}
	a, ok := <-accepted
	if !ok {
		d.Close()
		return nil, nil, nil, errors.New("accept failed")
	}
	ra, ok := a.(*rawConn)
	if !ok {
		return nil, nil, nil, errors.New("Conns did not wrap a TCP connection")
	}
	ra.raw.Store(true)
	return ra, d, func() { ra.Close(); d.Close() }, nil
}

// TestRawConnConformance runs x/net's conformance suite for net.Conn
// (reads and writes racing, deadlines past and future, a close during a
// blocked read) on two raw ends.
func TestRawConnConformance(t *testing.T) {
	nettest.TestConn(t, rawPipe)
}

// TestRawConnLargeWrite writes more than the socket buffers hold to a
// reader that starts late, so that the raw write meets EAGAIN and waits in
// the poller, and reads it back in small reads that meet EAGAIN too.
func TestRawConnLargeWrite(t *testing.T) {
	w, r, stop, err := rawPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(i*7 + i>>11)
	}
	want := sha256.Sum256(data)
	wrote := make(chan error, 1)
	go func() {
		n, err := w.Write(data)
		if err == nil && n != len(data) {
			err = io.ErrShortWrite
		}
		if err == nil {
			err = w.(*rawConn).CloseWrite()
		}
		wrote <- err
	}()
	time.Sleep(50 * time.Millisecond) // the writer fills the buffers first
	h := sha256.New()
	buf := make([]byte, 1500)
	n, err := io.CopyBuffer(h, struct{ io.Reader }{r}, buf)
	if err != nil {
		t.Fatalf("read after %d bytes: %v", n, err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("write: %v", err)
	}
	if n != int64(len(data)) || !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatalf("read %d bytes, not the %d written", n, len(data))
	}
}

// TestRawConnErrors: a read past its deadline is a timeout and a read of
// a closed connection net.ErrClosed, each a *net.OpError as net gives.
func TestRawConnErrors(t *testing.T) {
	a, b, stop, err := rawPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err = a.Read(make([]byte, 10))
	var op *net.OpError
	if !errors.As(err, &op) || !errors.Is(err, os.ErrDeadlineExceeded) || !op.Timeout() || op.Op != "read" ||
		strings.Contains(err.Error(), "raw-") {
		t.Fatalf("read past the deadline: %v (%T), want a read timeout as net's *net.OpError", err, err)
	}
	b.Close()
	if _, err := b.Write([]byte("x")); !errors.Is(err, net.ErrClosed) || !errors.As(err, &op) {
		t.Fatalf("write after close: %v, want net.ErrClosed", err)
	}
	a.SetReadDeadline(time.Time{})
	if _, err := a.Read(make([]byte, 10)); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want io.EOF", err)
	}
}

// TestRawFromTheFirstGatewayCall: a server's connection is plain until a
// worker's gateway call is served on it, and raw from then on; a
// connection that carries no gateway call, or only a refused one, stays
// plain; the upstream's connection is raw from its dial.
func TestRawFromTheFirstGatewayCall(t *testing.T) {
	var h *harness
	var rawDuring atomic.Int32 // 1: raw while the upstream answered; 2: not
	up := fakeAnthropic()
	rec := &connRecorder{}
	isRaw := func() bool {
		cs := rec.accepted()
		rc, ok := cs[len(cs)-1].(*rawConn)
		return ok && rc.raw.Load()
	}
	h = newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rawDuring.Store(2)
		if isRaw() {
			rawDuring.Store(1)
		}
		up.ServeHTTP(w, r)
	}), nil)
	mux := http.NewServeMux()
	mux.Handle(Prefix+"/", h.gw)
	mux.HandleFunc("/plain", func(w http.ResponseWriter, r *http.Request) {
		if callConn(r.Context()) == nil {
			t.Error("no connection in the request's context")
		}
		fmt.Fprint(w, isRaw())
	})
	srv := httptest.NewUnstartedServer(mux)
	rec.Listener = Conns(srv.Listener)
	srv.Listener = fdlimit.Listen(rec, 64) // around it, as the control-plane has it
	srv.Config.ConnContext = ConnContext
	srv.Start()
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	plain := func(want string) {
		t.Helper()
		resp, err := client.Get(srv.URL + "/plain")
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp.Body); got != want {
			t.Fatalf("raw %s, want %s", got, want)
		}
	}

	plain("false")
	denied, err := client.Post(srv.URL+Prefix+"/v1/messages", "application/json", strings.NewReader(streamBody))
	if err != nil {
		t.Fatal(err)
	}
	if readAll(t, denied.Body); denied.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a call without a token: %d", denied.StatusCode)
	}
	plain("false") // a call refused before its worker is known leaves it plain
	req, _ := http.NewRequest(http.MethodPost, srv.URL+Prefix+"/v1/messages", strings.NewReader(streamBody))
	req.Header.Set("X-Worker-Token", h.mint(convA))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp.Body); resp.StatusCode != http.StatusOK || !strings.Contains(body, "message_stop") {
		t.Fatalf("call: %d %s", resp.StatusCode, body)
	}
	if got := rawDuring.Load(); got != 1 {
		t.Fatalf("the server's connection was not raw while the call was served (%d)", got)
	}
	plain("true") // the same connection, after the call
	if n := len(rec.accepted()); n != 1 {
		t.Fatalf("%d connections accepted, want the one reused", n)
	}
	client.CloseIdleConnections()
	plain("false") // a new one

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := newTransport().DialContext(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if rc, ok := c.(*rawConn); !ok || !rc.raw.Load() {
		t.Fatalf("the upstream's connection is %T, not raw", c)
	}
}

// connRecorder is a listener that keeps what it accepted.
type connRecorder struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *connRecorder) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *connRecorder) accepted() []net.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]net.Conn(nil), l.conns...)
}

// BenchmarkRawReadEmpty is what a raw read of a socket with nothing in it
// costs: the read before each of a stream's events that finds the
// upstream's socket empty and sends the reader to the poller. It is the
// figure behind not keeping a read open across events to skip it.
func BenchmarkRawReadEmpty(b *testing.B) {
	c, _, stop, err := rawPipe()
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	rc := c.(*rawConn)
	buf := make([]byte, 4096)
	for b.Loop() {
		err := rc.rc.Read(func(fd uintptr) bool {
			_, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
			if e != syscall.EAGAIN {
				b.Fatalf("a read of an empty socket: %v", e)
			}
			return true
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// TestRawConnNoAllocs checks that a raw write and the read of its bytes
// allocate nothing: a stream makes them for every event, and each
// allocation is the garbage collector's work, at 256 streams of a
// model's pace some ten thousand times a second.
func TestRawConnNoAllocs(t *testing.T) {
	c1, c2, stop, err := rawPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	msg := []byte("event: content_block_delta\ndata: {}\n\n")
	buf := make([]byte, 4096)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := c1.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c2, buf[:len(msg)]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("a raw write and read allocate %v times, want none", allocs)
	}
}

// TestRawConnReadFrom checks that a request body, as the Transport's
// writer hands it over (bounded by its length), reaches the other end
// whole through a raw connection's ReadFrom, and without an allocation
// of the copy's buffer per body.
func TestRawConnReadFrom(t *testing.T) {
	c1, c2, stop, err := rawPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<10) // 16 KiB
	got := make([]byte, len(body))
	copyOnce := func() {
		n, err := c1.(io.ReaderFrom).ReadFrom(io.LimitReader(bytes.NewReader(body), int64(len(body))))
		if err != nil || n != int64(len(body)) {
			t.Fatalf("ReadFrom = %d, %v; want %d, nil", n, err, len(body))
		}
		if _, err := io.ReadFull(c2, got); err != nil {
			t.Fatal(err)
		}
	}
	copyOnce()
	if !bytes.Equal(got, body) {
		t.Fatal("the body arrived changed")
	}
	// The LimitReader and the bytes.Reader are the test's own.
	if allocs := testing.AllocsPerRun(50, copyOnce); allocs > 2 {
		t.Errorf("a body's copy allocates %v times, want at most the test's own 2", allocs)
	}
}
