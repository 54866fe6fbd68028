package h1serve

import (
	"io"
	"net/http"
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
