package h1serve

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestInvalidHeaderNamesDropped: a header or trailer name that is not a
// token (one with CR LF in it) is never written, as net/http drops it: it
// would split the response.
func TestInvalidHeaderNamesDropped(t *testing.T) {
	_, addr := start(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-A\r\nX-Injected"] = []string{"1"}
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, "x")
		w.Header().Set("X-Sum", "1")
		w.Header()[http.TrailerPrefix+"X-T\r\nX-Injected-Trailer"] = []string{"2"}
	})
	c := dial(t, addr)
	c.send("GET /hot/a HTTP/1.1\r\nHost: x\r\n\r\n")
	res, body := c.read("GET")
	if res.Header.Get("X-Injected") != "" || res.Trailer.Get("X-Injected-Trailer") != "" {
		t.Errorf("an injected line: header %v, trailer %v", res.Header, res.Trailer)
	}
	if body != "x" || res.Trailer.Get("X-Sum") != "1" {
		t.Errorf("body %q, trailer %v", body, res.Trailer)
	}
}

// TestBodyCloseKeepsConnection: a handler that closes the body it read
// (defer r.Body.Close(), as most do) leaves the connection for the next
// request, as net/http does.
func TestBodyCloseKeepsConnection(t *testing.T) {
	_, addr := start(t, func(w http.ResponseWriter, r *http.Request) {
		defer r.Body.Close()
		echo(w, r)
	})
	c := dial(t, addr)
	for _, p := range []string{"/hot/a", "/hot/b"} {
		c.send("POST " + p + " HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
		if _, body := c.read("POST"); body != "POST "+p+" hi" {
			t.Errorf("%s: %q", p, body)
		}
	}
}

// TestBodyCloseReadsNoMore: a body closed unread is not read whole by
// Close (a client could send gigabytes); the server reads what is left
// within its bound, and closes the connection beyond it.
func TestBodyCloseReadsNoMore(t *testing.T) {
	closed := make(chan struct{})
	_, addr := start(t, func(w http.ResponseWriter, r *http.Request) {
		r.Body.Close()
		close(closed)
		if _, err := r.Body.Read(make([]byte, 1)); err != http.ErrBodyReadAfterClose {
			t.Errorf("a read after Close: %v", err)
		}
	})
	c := dial(t, addr)
	c.send("POST /hot/a HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
	go func() {
		buf := make([]byte, 64<<10)
		for range 20 { // 1.25 MiB, then the client stalls
			if _, err := c.nc.Write(buf); err != nil {
				return
			}
		}
	}()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("the handler's Body.Close reads the whole body")
	}
	c.read("POST")
	if !c.closed() {
		t.Error("a connection with more than 256 KiB of body left was kept")
	}
}

// TestKeptBodyReadsNotTheNext: a body a handler kept, read after its
// request, never yields the next request's body.
func TestKeptBodyReadsNotTheNext(t *testing.T) {
	kept := make(chan io.Reader, 1)
	got := make(chan string, 1)
	_, addr := start(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hot/keep" {
			kept <- r.Body
			return
		}
		b, _ := io.ReadAll(<-kept) // the first request's body, read late
		got <- string(b)
	})
	c := dial(t, addr)
	c.send("GET /hot/keep HTTP/1.1\r\nHost: x\r\n\r\n")
	c.read("GET")
	c.send("POST /hot/b HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nSECRET")
	c.read("POST")
	if s := <-got; s != "" {
		t.Errorf("the first request's body read the second's: %q", s)
	}
}

// TestHandlerConnectionClose: a handler's "Connection: close" (the
// gateway's on a body it refused unread, httpapi.ReadBody's) ends the
// connection after the answer, as net/http's does, rather than the server
// draining the body and reading a next request; the head says it once.
func TestHandlerConnectionClose(t *testing.T) {
	_, addr := start(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusForbidden)
	})
	for _, req := range []string{
		"POST /hot/a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi",
		"POST /hot/a HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi",
	} {
		c := dial(t, addr)
		c.send(req)
		res, _ := c.read("POST")
		if !res.Close {
			t.Error("the answer does not say close")
		}
		if !c.closed() {
			t.Error("the connection was kept after the handler's Connection: close")
		}
		c.send(req) // the server must not answer it
		c.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if b, _ := io.ReadAll(c.br); len(b) > 0 {
			t.Errorf("a next request was served: %q", b)
		}
	}
	c := dial(t, addr)
	c.send("POST /hot/a HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
	head, _ := io.ReadAll(c.br)
	if n := strings.Count(strings.ToLower(string(head)), "connection: close"); n != 1 {
		t.Errorf("Connection: close %d times in %q", n, head)
	}
}

// TestUnreadBodyCloseKeepsAnswer: a connection closed with the request's
// body unread is closed as net/http closes it (its sending side first,
// then what the client still sends read for a moment), not at once: a
// close with unread bytes resets the connection, and what of the answer
// was still queued was lost.
func TestUnreadBodyCloseKeepsAnswer(t *testing.T) {
	answer := strings.Repeat("r", 256<<10)
	_, addr := start(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		io.WriteString(w, answer)
	})
	// A client that reads slowly: a small receive buffer, and a wait
	// before it reads, so that the answer is queued at the server when
	// the server closes.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	io.WriteString(nc, "POST /hot/a HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
	go func() {
		buf := make([]byte, 64<<10)
		for range 100 {
			if _, err := nc.Write(buf); err != nil {
				return
			}
		}
	}()
	time.Sleep(100 * time.Millisecond)
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(res.Body); len(b) != len(answer) {
		t.Errorf("the answer: %d bytes of %d, %v", len(b), len(answer), err)
	}
}

// TestHalfClosedClientGetsAnswer: a client that shut its sending side
// after its request (the watch reads EOF and cancels the context, as
// net/http's background read does) still gets the whole answer, as from
// net/http; the loop dropped it unsent.
func TestHalfClosedClientGetsAnswer(t *testing.T) {
	_, addr := start(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		io.WriteString(w, "late")
	}, func(s *Server) { s.WatchAfter = 10 * time.Millisecond })
	for _, p := range []string{"/hot/a", "/api/a"} {
		c := dial(t, addr)
		c.send("GET " + p + " HTTP/1.1\r\nHost: x\r\n\r\n")
		c.nc.(*net.TCPConn).CloseWrite()
		res, err := http.ReadResponse(c.br, nil)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if b, err := io.ReadAll(res.Body); string(b) != "late" || err != nil {
			t.Errorf("%s: %q, %v", p, b, err)
		}
	}
}

// TestDeadlinesEndWithRequest: a read or write deadline a handler set
// (http.ResponseController, httpapi.BodyDeadline) does not outlive its
// request: net/http lifts both before the next one.
func TestDeadlinesEndWithRequest(t *testing.T) {
	_, addr := start(t, func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.URL.Path == "/hot/set" {
			rc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			rc.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		}
		io.WriteString(w, "ok")
	})
	c := dial(t, addr)
	c.send("GET /hot/set HTTP/1.1\r\nHost: x\r\n\r\n")
	c.read("GET")
	time.Sleep(150 * time.Millisecond)
	c.send("GET /hot/next HTTP/1.1\r\nHost: x\r\n\r\n")
	c.read("GET")
}

// TestShortWatchAfter: a WatchAfter of a nanosecond does not panic the
// ticker (an interval of WatchAfter/2 = 0).
func TestShortWatchAfter(t *testing.T) {
	_, addr := start(t, echo, func(s *Server) { s.WatchAfter = 1 })
	c := dial(t, addr)
	c.send("GET /hot/a HTTP/1.1\r\nHost: x\r\n\r\n")
	c.read("GET")
}

// TestHTTP10KeepAlive: an HTTP/1.0 request that asked to keep the
// connection is told it is kept ("Connection: keep-alive", as net/http
// says): a 1.0 client takes an answer without it for the connection's
// last, and the server waited for a next request that never came.
func TestHTTP10KeepAlive(t *testing.T) {
	_, addr := start(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "2")
		io.WriteString(w, "ok")
	})
	c := dial(t, addr)
	for range 2 {
		c.send("GET /hot/a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
		res, body := c.read("GET")
		if body != "ok" || res.Header.Get("Connection") != "keep-alive" {
			t.Errorf("body %q, Connection %q", body, res.Header.Get("Connection"))
		}
	}
}

// TestHeadTimeoutWhileDeciding: a request line that stops before it
// tells whether it is hot is closed at the loop's ReadHeaderTimeout, not
// handed to net/http for a second one (a slow client held the connection
// twice as long).
func TestHeadTimeoutWhileDeciding(t *testing.T) {
	const timeout = 300 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: http.HandlerFunc(echo), HotPrefix: "/hot/", ReadHeaderTimeout: timeout}
	hs := &http.Server{Handler: http.HandlerFunc(echo), ReadHeaderTimeout: timeout}
	go hs.Serve(s.Start(ln))
	t.Cleanup(func() { s.Close(); hs.Close() })
	c := dial(t, ln.Addr().String())
	c.send("GET /ho")
	start := time.Now()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.ReadAll(c.br)
	if d := time.Since(start); d > timeout+timeout/2 {
		t.Errorf("closed after %v, with a head timeout of %v", d, timeout)
	}
}
