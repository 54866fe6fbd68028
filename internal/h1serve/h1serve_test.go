package h1serve

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// servedBy is a header the test handlers answer with: "loop" for a
// request served on the loop, "nethttp" for one net/http served (which
// puts its *http.Server in the request's context).
const servedBy = "X-Served-By"

func which(r *http.Request) string {
	if r.Context().Value(http.ServerContextKey) != nil {
		return "nethttp"
	}
	return "loop"
}

// start serves h on a loopback listener, hot for "/hot/", and returns the
// address; both servers are closed when the test ends.
func start(t *testing.T, h http.HandlerFunc, opts ...func(*Server)) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wrapped := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(servedBy, which(r))
		h(w, r)
	})
	s := &Server{Handler: wrapped, HotPrefix: "/hot/", Logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(s)
	}
	rest := s.Start(ln)
	hs := &http.Server{Handler: wrapped}
	go hs.Serve(rest)
	t.Cleanup(func() {
		s.Close()
		hs.Close()
	})
	return s, ln.Addr().String()
}

// rawConn is a client connection that writes raw requests and reads
// responses with net/http's parser.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *rawConn) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.nc, s); err != nil {
		c.t.Fatal(err)
	}
}

// read reads one response and its whole body.
func (c *rawConn) read(method string) (*http.Response, string) {
	c.t.Helper()
	res, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		c.t.Fatalf("reading a response: %v", err)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Fatalf("reading a response's body: %v", err)
	}
	return res, string(b)
}

// closed says whether the server closed the connection (nothing more to
// read).
func (c *rawConn) closed() bool {
	c.nc.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := c.br.ReadByte()
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err)
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

func echo(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, b)
}

func TestHotAndRest(t *testing.T) {
	_, addr := start(t, echo)
	c := dial(t, addr)
	// Two on the loop, then one for net/http: from then on the
	// connection is net/http's, a hot request included.
	steps := []struct{ path, by string }{
		{"/hot/a", "loop"},
		{"/hot/b", "loop"},
		{"/api/x", "nethttp"},
		{"/hot/c", "nethttp"},
	}
	for _, s := range steps {
		c.send("POST " + s.path + " HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
		res, body := c.read("POST")
		if got := res.Header.Get(servedBy); got != s.by {
			t.Errorf("%s served by %s, want %s", s.path, got, s.by)
		}
		if want := "POST " + s.path + " hi"; body != want {
			t.Errorf("%s: body %q, want %q", s.path, body, want)
		}
	}
	// A fresh connection starts on the loop again.
	c = dial(t, addr)
	c.send("GET /hot/d HTTP/1.1\r\nHost: x\r\n\r\n")
	if res, _ := c.read("GET"); res.Header.Get(servedBy) != "loop" {
		t.Errorf("a new connection's hot request served by %s", res.Header.Get(servedBy))
	}
}

func TestPrefixDecidedOnPartialLine(t *testing.T) {
	// The request line arrives a byte at a time: the decision waits for
	// enough of it, and nothing read to decide is lost.
	_, addr := start(t, echo)
	for path, by := range map[string]string{"/hot/x": "loop", "/ho": "nethttp", "/hotter": "nethttp", "/api/hot/": "nethttp"} {
		c := dial(t, addr)
		req := "OPTIONS " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
		for i := range len(req) {
			c.send(req[i : i+1])
			if i < 12 {
				time.Sleep(time.Millisecond) // separate segments, not synchronisation
			}
		}
		res, _ := c.read("OPTIONS")
		if got := res.Header.Get(servedBy); got != by {
			t.Errorf("%s served by %s, want %s", path, got, by)
		}
	}
}

func TestChunkedRequestAndResponse(t *testing.T) {
	_, addr := start(t, echo)
	c := dial(t, addr)
	c.send("POST /hot/c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
	res, body := c.read("POST")
	if body != "POST /hot/c abcde" {
		t.Errorf("body %q", body)
	}
	if len(res.TransferEncoding) != 1 || res.TransferEncoding[0] != "chunked" {
		t.Errorf("a response without a length is sent %v, want chunked", res.TransferEncoding)
	}
	if res.Close {
		t.Error("the connection is not kept")
	}
}

func TestFlushSendsEachEvent(t *testing.T) {
	// Each flushed event reaches the client before the handler writes the
	// next: the handler waits for the client's word between the two.
	next := make(chan struct{})
	_, addr := start(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		io.WriteString(w, "data: one\n\n")
		if err := rc.Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
		<-next
		io.WriteString(w, "data: two\n\n")
	})
	c := dial(t, addr)
	c.send("GET /hot/s HTTP/1.1\r\nHost: x\r\n\r\n")
	res, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(res.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}
	close(next)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "\ndata: two\n\n" {
		t.Fatalf("the rest: %q, %v", rest, err)
	}
}

func TestResponseFraming(t *testing.T) {
	_, addr := start(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hot/length":
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "12345")
		case "/hot/short":
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "12345") // less than promised: the connection must end
		case "/hot/empty":
		case "/hot/nocontent":
			w.WriteHeader(http.StatusNoContent)
			if _, err := io.WriteString(w, "x"); !errors.Is(err, http.ErrBodyNotAllowed) {
				t.Errorf("a body for a 204: %v", err)
			}
		case "/hot/trailer":
			w.Header().Set("Trailer", "X-Sum")
			io.WriteString(w, "abc")
			w.Header().Set("X-Sum", "3")
			w.Header().Set(http.TrailerPrefix+"X-Late", "yes")
		case "/hot/split":
			w.Header().Set("X-Bad", "a\r\nX-Injected: 1")
		}
	})
	c := dial(t, addr)
	for _, tc := range []struct {
		path, method, body string
		check              func(*http.Response)
	}{
		{"/hot/length", "GET", "12345", func(res *http.Response) {
			if res.ContentLength != 5 {
				t.Errorf("length %d", res.ContentLength)
			}
		}},
		{"/hot/empty", "GET", "", nil},
		{"/hot/length", "HEAD", "", func(res *http.Response) {
			if res.ContentLength != 5 {
				t.Errorf("HEAD: length %d", res.ContentLength)
			}
		}},
		{"/hot/nocontent", "GET", "", func(res *http.Response) {
			if res.StatusCode != http.StatusNoContent {
				t.Errorf("status %d", res.StatusCode)
			}
		}},
		{"/hot/trailer", "GET", "abc", func(res *http.Response) {
			if res.Trailer.Get("X-Sum") != "3" || res.Trailer.Get("X-Late") != "yes" {
				t.Errorf("trailers %v", res.Trailer)
			}
		}},
		{"/hot/split", "GET", "", func(res *http.Response) {
			if res.Header.Get("X-Injected") != "" || res.Header.Get("X-Bad") != "" {
				t.Errorf("a value with CR LF was sent: %v", res.Header)
			}
		}},
	} {
		c.send(tc.method + " " + tc.path + " HTTP/1.1\r\nHost: x\r\n\r\n")
		res, body := c.read(tc.method)
		if body != tc.body {
			t.Errorf("%s %s: body %q, want %q", tc.method, tc.path, body, tc.body)
		}
		if tc.check != nil {
			tc.check(res)
		}
	}
	// All of these kept the connection; the short one ends it.
	c.send("GET /hot/short HTTP/1.1\r\nHost: x\r\n\r\n")
	res, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(res.Body); err == nil {
		t.Errorf("a body shorter than its length read whole: %q", b)
	}
}

func TestBadRequests(t *testing.T) {
	_, addr := start(t, echo, func(s *Server) { s.MaxHeaderBytes = 1 << 10 })
	for name, tc := range map[string]struct {
		req    string
		status int
	}{
		"no host":         {"GET /hot/x HTTP/1.1\r\n\r\n", 400},
		"two hosts":       {"GET /hot/x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
		"bad host":        {"GET /hot/x HTTP/1.1\r\nHost: a b\r\n\r\n", 400},
		"bad header name": {"GET /hot/x HTTP/1.1\r\nHost: a\r\nX Y: 1\r\n\r\n", 400},
		"bad length":      {"POST /hot/x HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400},
		"two lengths":     {"POST /hot/x HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400},
		"bad version":     {"GET /hot/x HTTP/9.9\r\nHost: a\r\n\r\n", 505},
		"head too large":  {"GET /hot/x HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("a", 8<<10) + "\r\n\r\n", 431},
		"bad expect":      {"POST /hot/x HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\na", 417},
	} {
		t.Run(name, func(t *testing.T) {
			c := dial(t, addr)
			c.send(tc.req)
			res, _ := c.read("GET")
			if res.StatusCode != tc.status {
				t.Errorf("status %d, want %d", res.StatusCode, tc.status)
			}
			if !c.closed() {
				t.Error("the connection was kept after a bad request")
			}
		})
	}
}

func TestExpectContinue(t *testing.T) {
	_, addr := start(t, echo)
	c := dial(t, addr)
	c.send("POST /hot/x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
	line, err := c.br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	if blank, _ := c.br.ReadString('\n'); blank != "\r\n" {
		t.Fatalf("after 100 Continue: %q", blank)
	}
	c.send("abc")
	if _, body := c.read("POST"); body != "POST /hot/x abc" {
		t.Errorf("body %q", body)
	}

	// A handler that answers without reading the body never asks for it,
	// and the client that waits for 100 Continue cannot send the next
	// request on this connection: it is closed.
	_, addr = start(t, func(w http.ResponseWriter, r *http.Request) {})
	c = dial(t, addr)
	c.send("POST /hot/x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
	res, _ := c.read("POST")
	if res.StatusCode != 200 || !c.closed() {
		t.Errorf("status %d; the connection must end", res.StatusCode)
	}
}

func TestUnreadBody(t *testing.T) {
	// A body the handler did not read is read past when small, so the
	// connection carries the next request; a large one ends it.
	_, addr := start(t, func(w http.ResponseWriter, r *http.Request) {})
	c := dial(t, addr)
	c.send("POST /hot/x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello")
	c.read("POST")
	c.send("GET /hot/y HTTP/1.1\r\nHost: a\r\n\r\n")
	if res, _ := c.read("GET"); res.StatusCode != 200 {
		t.Fatalf("the next request: %d", res.StatusCode)
	}
	big := 1 << 20
	c.send(fmt.Sprintf("POST /hot/x HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n", big))
	go c.nc.Write(make([]byte, big))
	c.read("POST")
	if !c.closed() {
		t.Error("a connection with 1 MiB of unread body was kept")
	}
}

func TestClientClose(t *testing.T) {
	_, addr := start(t, echo)
	c := dial(t, addr)
	c.send("GET /hot/x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
	res, _ := c.read("GET")
	if !res.Close || !c.closed() {
		t.Error("Connection: close was not honoured")
	}
	// HTTP/1.0 without keep-alive: closed after the answer, which has no
	// chunking (1.0 does not know it).
	_, addr = start(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "old") })
	c = dial(t, addr)
	c.send("GET /hot/x HTTP/1.0\r\n\r\n")
	res, body := c.read("GET")
	if body != "old" || len(res.TransferEncoding) != 0 || !c.closed() {
		t.Errorf("HTTP/1.0: body %q, transfer encoding %v", body, res.TransferEncoding)
	}
}

func TestPanic(t *testing.T) {
	_, addr := start(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hot/abort" {
			io.WriteString(w, "partial")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		if r.URL.Path == "/hot/boom" {
			panic("boom")
		}
	})
	for _, p := range []string{"/hot/abort", "/hot/boom"} {
		c := dial(t, addr)
		c.send("GET " + p + " HTTP/1.1\r\nHost: a\r\n\r\n")
		// Whatever was sent, the connection ends: a client never takes a
		// cut response for a whole one.
		if res, err := http.ReadResponse(c.br, nil); err == nil {
			if _, err := io.ReadAll(res.Body); err == nil {
				t.Errorf("%s: a whole response after a panic", p)
			}
		}
	}
	// The server goes on.
	c := dial(t, addr)
	c.send("GET /api/ok HTTP/1.1\r\nHost: a\r\n\r\n")
	if res, _ := c.read("GET"); res.StatusCode != 200 {
		t.Errorf("after the panics: %d", res.StatusCode)
	}
}

func TestTimeouts(t *testing.T) {
	_, addr := start(t, echo, func(s *Server) {
		s.ReadHeaderTimeout = 100 * time.Millisecond
		s.IdleTimeout = 100 * time.Millisecond
	})
	// A head that never ends.
	c := dial(t, addr)
	c.send("GET /hot/x HTTP/1.1\r\nHost: a\r\n")
	if !c.closed() {
		t.Error("an unfinished head was waited for past the timeout")
	}
	// An idle kept connection.
	c = dial(t, addr)
	c.send("GET /hot/x HTTP/1.1\r\nHost: a\r\n\r\n")
	c.read("GET")
	if !c.closed() {
		t.Error("an idle connection was kept past the timeout")
	}
}

func TestShutdown(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{})
	s, addr := start(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hot/slow" {
			close(entered)
			<-release
		}
		io.WriteString(w, "done")
	})
	idle := dial(t, addr)
	idle.send("GET /hot/x HTTP/1.1\r\nHost: a\r\n\r\n")
	idle.read("GET")
	busy := dial(t, addr)
	busy.send("GET /hot/slow HTTP/1.1\r\nHost: a\r\n\r\n")
	<-entered

	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	if !idle.closed() {
		t.Error("an idle connection was not closed by Shutdown")
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned while a request was served: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	res, body := busy.read("GET")
	if body != "done" || !res.Close {
		t.Errorf("the request served during Shutdown: %q, close %v", body, res.Close)
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Error("the listener accepts after Shutdown")
	}
}

func TestShutdownDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	entered := make(chan struct{})
	s, addr := start(t, func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	})
	c := dial(t, addr)
	c.send("GET /hot/x HTTP/1.1\r\nHost: a\r\n\r\n")
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with a request that does not end: %v", err)
	}
}

func TestRestListenerClose(t *testing.T) {
	// Closing the listener net/http serves ends the accepting (as
	// http.Server.Close does), and a connection handed after that is
	// closed, not leaked.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: http.NotFoundHandler(), HotPrefix: "/hot/"}
	rest := s.Start(ln)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := rest.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v", err)
		}
	}()
	rest.Close()
	wg.Wait()
	if _, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		t.Error("the listener accepts after the rest's Close")
	}
	s.Close()
}

// FuzzServe sends arbitrary bytes as a connection's requests: the loop
// must neither panic nor hang, and what it answers must parse as HTTP
// responses. The connections are socket pairs handed to the server by a
// listener of the test's own, so that many short runs use up no ports.
func FuzzServe(f *testing.F) {
	for _, seed := range []string{
		"GET /hot/x HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /hot/x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET /hot/y HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /hot/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"POST /hot/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
		"POST /hot/x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nz",
		"GET /hot/x HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /api HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /hot/x HTTP/1.1\r\nHost: a\r\nX: \x00\r\n\r\n",
		"\r\n\r\nGET",
	} {
		f.Add([]byte(seed))
	}
	ln := &pairListener{conns: make(chan net.Conn), done: make(chan struct{})}
	s := &Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			w.Write(b)
		}),
		HotPrefix:         "/hot/",
		ReadHeaderTimeout: time.Second,
		Logger:            slog.New(slog.DiscardHandler),
	}
	go (&http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second}).Serve(s.Start(ln))
	f.Cleanup(func() { s.Close() })
	f.Fuzz(func(t *testing.T, data []byte) {
		nc := ln.dial(t)
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		go func() {
			nc.Write(data)
			nc.CloseWrite()
		}()
		out, err := io.ReadAll(nc)
		if err != nil && !isReset(err) {
			t.Fatalf("the connection did not end: %v", err)
		}
		if len(out) == 0 {
			return
		}
		if _, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), nil); err != nil {
			t.Fatalf("an answer that is not HTTP: %v\n%q", err, out)
		}
	})
}

// pairListener accepts the server's ends of socket pairs made by dial.
type pairListener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *pairListener) dial(t *testing.T) *net.UnixConn {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	server, client := conn(fds[0]), conn(fds[1])
	select {
	case l.conns <- server:
	case <-l.done:
		t.Fatal("the listener is closed")
	}
	return client.(*net.UnixConn)
}

func (l *pairListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pairListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pairListener) Addr() net.Addr { return &net.UnixAddr{Name: "pair", Net: "unix"} }

// awaitCancel reads a request's body, sends the head of its answer, and
// says on cancelled whether the request's context ended within 5 s.
func awaitCancel(cancelled chan<- bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		io.WriteString(w, "head")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			cancelled <- true
		case <-time.After(5 * time.Second):
			cancelled <- false
		}
	}
}

func TestClientGoneCancels(t *testing.T) {
	cancelled := make(chan bool, 1)
	_, addr := start(t, awaitCancel(cancelled), func(s *Server) { s.WatchAfter = 20 * time.Millisecond })
	c := dial(t, addr)
	c.send("POST /hot/x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi")
	if _, err := http.ReadResponse(c.br, nil); err != nil {
		t.Fatal(err)
	}
	c.nc.Close()
	if !<-cancelled {
		t.Error("the request's context was not cancelled when its client went away")
	}
}

func TestWatchLeavesPipelinedRequest(t *testing.T) {
	// A watched request whose client sends the next one meanwhile is
	// not cancelled, and the next one is served whole.
	served := make(chan bool, 2)
	_, addr := start(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hot/slow" {
			select {
			case <-r.Context().Done():
				served <- false
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		served <- true
		echo(w, r)
	}, func(s *Server) { s.WatchAfter = 10 * time.Millisecond })
	c := dial(t, addr)
	c.send("GET /hot/slow HTTP/1.1\r\nHost: a\r\n\r\n")
	time.Sleep(50 * time.Millisecond) // the watch has started: not synchronisation, the test holds either way
	c.send("POST /hot/next HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nnext")
	if _, body := c.read("GET"); body != "GET /hot/slow " {
		t.Errorf("the slow request: %q", body)
	}
	if _, body := c.read("POST"); body != "POST /hot/next next" {
		t.Errorf("the pipelined request: %q", body)
	}
	if !<-served || !<-served {
		t.Error("a request was cancelled while its client was there")
	}
}

// TestBodyTimeout: a body that does not arrive within BodyTimeout fails
// the handler's read; one read to its end lifts the deadline, so that an
// answer streamed for longer than it is not cut off and the connection is
// kept; a body the handler leaves unread is drained under it, and a client
// that trickles it loses the connection after its answer.
func TestBodyTimeout(t *testing.T) {
	const timeout = 150 * time.Millisecond
	readErr := make(chan error, 1)
	_, addr := start(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hot/read":
			_, err := io.ReadAll(r.Body)
			readErr <- err
			if err != nil {
				w.WriteHeader(http.StatusRequestTimeout)
				return
			}
			// Stream for longer than the body's deadline.
			rc := http.NewResponseController(w)
			for i := range 3 {
				fmt.Fprintf(w, "part %d;", i)
				rc.Flush()
				time.Sleep(timeout)
			}
		case "/hot/unread":
			io.WriteString(w, "not read")
		}
	}, func(s *Server) { s.BodyTimeout = timeout })

	// Whole bodies, fixed and chunked: the answer streams past the
	// deadline, and the connection serves the next request.
	c := dial(t, addr)
	for _, req := range []string{
		"POST /hot/read HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
		"POST /hot/read HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	} {
		c.send(req)
		res, body := c.read("POST")
		if err := <-readErr; err != nil || res.StatusCode != 200 || body != "part 0;part 1;part 2;" {
			t.Fatalf("a whole body: read error %v, answer %d %q", err, res.StatusCode, body)
		}
	}
	// A request without a body, after the others: no deadline left on the
	// connection cuts its answer off.
	c.send("GET /hot/read HTTP/1.1\r\nHost: a\r\n\r\n")
	if res, body := c.read("GET"); <-readErr != nil || body != "part 0;part 1;part 2;" {
		t.Fatalf("a request without a body: %d %q", res.StatusCode, body)
	}

	// A body that stops coming: the handler's read fails at the deadline.
	c = dial(t, addr)
	c.send("POST /hot/read HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nhel")
	select {
	case err := <-readErr:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a stalled body's read: %v, want the deadline", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stalled body was waited for past its deadline")
	}
	if res, _ := c.read("POST"); res.StatusCode != http.StatusRequestTimeout {
		t.Errorf("a stalled body: status %d", res.StatusCode)
	}
	if !c.closed() {
		t.Error("the connection of a stalled body was kept")
	}

	// A body the handler does not read, trickled: the answer comes, and
	// the drain ends at the deadline with the connection.
	c = dial(t, addr)
	c.send("POST /hot/unread HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nhel")
	if _, body := c.read("POST"); body != "not read" {
		t.Errorf("an unread body's answer: %q", body)
	}
	if !c.closed() {
		t.Error("the connection of a trickled, unread body was kept")
	}
}

// TestBodyTimeoutLeavesTheWatch: once a body has been read, its deadline
// is off the connection, so that the watch still sees a client go away
// long after it.
func TestBodyTimeoutLeavesTheWatch(t *testing.T) {
	const timeout = 50 * time.Millisecond
	cancelled := make(chan bool, 1)
	_, addr := start(t, awaitCancel(cancelled), func(s *Server) {
		s.BodyTimeout = timeout
		s.WatchAfter = 10 * time.Millisecond
	})
	c := dial(t, addr)
	c.send("POST /hot/x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi")
	if _, err := http.ReadResponse(c.br, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * timeout) // past the body's deadline
	c.nc.Close()
	if !<-cancelled {
		t.Error("the request's context was not cancelled when its client went away after the body's deadline")
	}
}
