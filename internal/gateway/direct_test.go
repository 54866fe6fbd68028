package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// sseHandler streams n events, flushing each, after reading the body.
func sseHandler(n int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range n {
			fmt.Fprintf(w, "event: ping\ndata: {\"i\":%d}\n\n", i)
			w.(http.Flusher).Flush()
		}
	}
}

func directFor(t testing.TB, rawURL string, tlsConf *tls.Config, fallback http.RoundTripper) *directTransport {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	if fallback == nil {
		fallback = newHTTPTransport()
	}
	d := newDirectTransport(u.Scheme, u.Host, tlsConf, fallback)
	if d == nil {
		t.Fatalf("no direct transport for %s", rawURL)
	}
	t.Cleanup(d.CloseIdleConnections)
	return d
}

// post sends a body to url through rt and returns the response's body.
func post(t *testing.T, rt http.RoundTripper, rawURL, body string) (string, *http.Response) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, rawURL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return string(b), res
}

func wantEvents(t *testing.T, got string, n int) {
	t.Helper()
	if c := strings.Count(got, "event: ping\n"); c != n || !strings.Contains(got, fmt.Sprintf(`{"i":%d}`, n-1)) {
		t.Fatalf("got %d events, want %d: %q", c, n, got)
	}
}

func (t *directTransport) dialed() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dials
}

// TestDirectTransportHTTP1 streams over plain HTTP/1.1: the whole stream
// arrives, the body the upstream reads is the one sent, and later calls
// reuse the one connection.
func TestDirectTransportHTTP1(t *testing.T) {
	var bodies atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if string(b) == requestBody && r.ContentLength == int64(len(requestBody)) {
			bodies.Add(1)
		}
		r.Body = io.NopCloser(strings.NewReader(""))
		sseHandler(50)(w, r)
	}))
	defer up.Close()
	d := directFor(t, up.URL, nil, nil)
	for range 5 {
		got, res := post(t, d, up.URL+"/v1/messages", requestBody)
		wantEvents(t, got, 50)
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("status %d, headers %v", res.StatusCode, res.Header)
		}
	}
	if bodies.Load() != 5 {
		t.Errorf("the upstream read %d of 5 bodies intact", bodies.Load())
	}
	if n := d.dialed(); n != 1 {
		t.Errorf("%d connections for 5 calls one after another, want 1", n)
	}
}

// TestDirectTransportTLS speaks HTTP/1.1 over TLS to an upstream that
// offers HTTP/2 too, as api.anthropic.com does, and reuses the
// connection.
func TestDirectTransportTLS(t *testing.T) {
	var h1 atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 1 && r.TLS != nil {
			h1.Add(1)
		}
		sseHandler(20)(w, r)
	}))
	up.EnableHTTP2 = true
	up.StartTLS()
	defer up.Close()
	if !strings.Contains(strings.Join(up.TLS.NextProtos, ","), "h2") {
		t.Fatalf("the test server does not offer h2: %v", up.TLS.NextProtos)
	}
	roots := up.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	d := directFor(t, up.URL, &tls.Config{RootCAs: roots}, nil)
	for range 3 {
		got, _ := post(t, d, up.URL+"/v1/messages", requestBody)
		wantEvents(t, got, 20)
	}
	if h1.Load() != 3 {
		t.Errorf("%d of 3 calls arrived as HTTP/1.1 over TLS", h1.Load())
	}
	if n := d.dialed(); n != 1 {
		t.Errorf("%d connections for 3 calls, want 1", n)
	}

	// A certificate the transport does not trust is refused.
	bad := directFor(t, up.URL, nil, nil)
	req, _ := http.NewRequest(http.MethodPost, up.URL+"/v1/messages", strings.NewReader("{}"))
	if _, err := bad.RoundTrip(req); err == nil {
		t.Error("a call to a server with an unknown certificate got through")
	}
}

// oneShotServer answers each connection's first request with a stream in
// HTTP/1.1 keep-alive form, then closes the connection, with a reset when
// rst is set; closed gets a value once it has.
func oneShotServer(t *testing.T, rst bool) (addr string, closed chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	closed = make(chan struct{}, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					c.Close()
					return
				}
				io.Copy(io.Discard, req.Body)
				const ev = "event: ping\ndata: {\"i\":0}\n\n"
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s", len(ev), ev)
				if rst {
					c.(*net.TCPConn).SetLinger(0)
				}
				c.Close()
				closed <- struct{}{}
			}()
		}
	}()
	return l.Addr().String(), closed
}

// TestDirectTransportStaleConnection: an idle connection the upstream
// closed (with a FIN or a reset) is noticed before it is used, and the
// call goes on a new one instead of failing.
func TestDirectTransportStaleConnection(t *testing.T) {
	for _, rst := range []bool{false, true} {
		t.Run(fmt.Sprintf("reset=%v", rst), func(t *testing.T) {
			addr, closed := oneShotServer(t, rst)
			d := directFor(t, "http://"+addr, nil, nil)
			for i := range 3 {
				got, _ := post(t, d, "http://"+addr+"/v1/messages", requestBody)
				wantEvents(t, got, 1)
				select {
				case <-closed:
				case <-time.After(waitLimit):
					t.Fatal("the server did not close the connection")
				}
				// The close has left the server; let it arrive.
				time.Sleep(20 * time.Millisecond)
				if n := d.dialed(); n != i+1 {
					t.Fatalf("after %d calls, %d connections", i+1, n)
				}
			}
		})
	}
}

// TestDirectTransportNotReused: a connection whose response was not read
// to its end, or that the upstream said it closes, or whose call was
// cancelled, is closed, never given to the next call.
func TestDirectTransportNotReused(t *testing.T) {
	block := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/close":
			w.Header().Set("Connection", "close")
			sseHandler(2)(w, r)
		case "/block":
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: ping\ndata: {}\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-block:
			case <-r.Context().Done():
			}
		default:
			sseHandler(100)(w, r)
		}
	}))
	defer up.Close()
	defer close(block)
	d := directFor(t, up.URL, nil, nil)

	// Closed before its end.
	req, _ := http.NewRequest(http.MethodPost, up.URL+"/v1/messages", strings.NewReader("{}"))
	res, err := d.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Read(make([]byte, 10))
	res.Body.Close()
	wantEvents(t, func() string { s, _ := post(t, d, up.URL+"/v1/messages", "{}"); return s }(), 100)
	if n := d.dialed(); n != 2 {
		t.Errorf("after a body closed early: %d connections, want 2", n)
	}

	// Connection: close, on the second connection.
	post(t, d, up.URL+"/close", "{}")
	post(t, d, up.URL+"/v1/messages", "{}")
	if n := d.dialed(); n != 3 {
		t.Errorf("after a Connection: close answer: %d connections, want 3", n)
	}

	// Cancelled mid-stream: the read ends at once, with the context's error.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, up.URL+"/block", strings.NewReader("{}"))
	res, err = d.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := res.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err = io.ReadAll(res.Body)
	res.Body.Close()
	if !errors.Is(err, context.Canceled) {
		t.Errorf("read after cancel: %v, want context.Canceled", err)
	}
	if time.Since(start) > waitLimit {
		t.Error("the read did not end with the cancel")
	}
	post(t, d, up.URL+"/v1/messages", "{}")
	if n := d.dialed(); n != 4 {
		t.Errorf("after a cancelled call on the third connection: %d connections, want 4", n)
	}

	// Cancelled before the call: no request goes out.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, up.URL+"/v1/messages", strings.NewReader("{}"))
	if _, err := d.RoundTrip(req); !errors.Is(err, context.Canceled) {
		t.Errorf("a call cancelled before it began: %v, want context.Canceled", err)
	}
}

type countingRT struct{ n atomic.Int64 }

func (c *countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// TestDirectTransportFallback: a request for another host or scheme goes
// to the fallback transport, and an upstream that is not http or https
// gets no direct transport at all.
func TestDirectTransportFallback(t *testing.T) {
	up := httptest.NewServer(sseHandler(1))
	defer up.Close()
	other := httptest.NewServer(sseHandler(3))
	defer other.Close()
	fb := &countingRT{}
	d := directFor(t, up.URL, nil, fb)
	got, _ := post(t, d, other.URL+"/v1/messages", "{}")
	wantEvents(t, got, 3)
	if fb.n.Load() != 1 || d.dialed() != 0 {
		t.Errorf("another host: fallback used %d times, %d direct connections", fb.n.Load(), d.dialed())
	}
	if newDirectTransport("ftp", "example.com", nil, fb) != nil {
		t.Error("a direct transport for ftp")
	}
	u, _ := url.Parse(up.URL)
	if _, ok := newTransport(u).(*directTransport); !ok {
		t.Error("the default transport for an http upstream is not the direct one")
	}
	if _, ok := newTransport(&url.URL{Scheme: "https", Host: "api.anthropic.com"}).(*directTransport); !ok {
		t.Error("the default transport for an https upstream is not the direct one")
	}
}

// TestDirectTransportThroughGateway: a stream through the gateway on the
// direct transport over TLS is metered as on http.Transport.
func TestDirectTransportThroughGateway(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Api-Key") != testAPIKey || r.ProtoMajor != 1 {
			http.Error(w, "bad upstream request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, cannedStream)
	}))
	up.EnableHTTP2 = true
	up.StartTLS()
	defer up.Close()
	roots := up.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	u, _ := url.Parse(up.URL)
	d := newDirectTransport(u.Scheme, u.Host, &tls.Config{RootCAs: roots}, newHTTPTransport())
	defer d.CloseIdleConnections()
	h := newHarnessURL(t, up.URL, &Options{Transport: d})
	for range 2 {
		resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), streamBody)
		if got := readAll(t, resp.Body); resp.StatusCode != 200 || got != cannedStream {
			t.Fatalf("status %d, body %q", resp.StatusCode, got)
		}
		checkRecord(t, recordOf(convA, 200, true, cannedStreamUsage), h.recordFor(t))
	}
	if d.dialed() != 1 {
		t.Errorf("%d upstream connections for 2 calls, want 1", d.dialed())
	}
}

// TestDirectTransportTLSLeftovers: bytes the upstream sent past a
// response's end in the same TLS record are held inside the TLS
// connection, where neither the reader's buffer nor a peek at the socket
// sees them. Such a connection is not reused: the next call would read
// those bytes as its own response.
func TestDirectTransportTLSLeftovers(t *testing.T) {
	up := httptest.NewTLSServer(http.NotFoundHandler())
	defer up.Close()
	roots := up.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	conf := up.TLS.Clone()
	conf.NextProtos = []string{"http/1.1"}
	conf.DynamicRecordSizingDisabled = true // the response and its leftovers in one record
	l, err := tls.Listen("tcp", "127.0.0.1:0", conf)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var calls atomic.Int64
	serveRaw(l, func(c net.Conn, _ *http.Request) {
		if calls.Add(1) > 1 {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh")
			return
		}
		body := strings.Repeat("x", 8192)
		const extra = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale"
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s%s", len(body), body, extra)
	})
	u := "https://" + l.Addr().String()
	d := directFor(t, u, &tls.Config{RootCAs: roots, ServerName: "example.com"}, nil)
	req, _ := http.NewRequest(http.MethodPost, u+"/v1/messages", strings.NewReader("{}"))
	res, err := d.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	// Read as ReverseProxy does, with a large buffer.
	n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{res.Body}, make([]byte, 32<<10))
	res.Body.Close()
	if err != nil || n != 8192 {
		t.Fatalf("first body: %d bytes, %v", n, err)
	}
	if got, _ := post(t, d, u+"/v1/messages", "{}"); got != "fresh" {
		t.Errorf("second call read %q, want the upstream's answer to it", got)
	}
}

// TestDirectTransportBoundsTheHead: an upstream that sends a response head
// without end, or interim answers without end, fails the call instead of
// growing the gateway's memory; a head within the bound still works after
// a long one on another connection.
func TestDirectTransportBoundsTheHead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serveRaw(ln, func(c net.Conn, req *http.Request) {
		switch req.URL.Path {
		case "/long-head":
			io.WriteString(c, "HTTP/1.1 200 OK\r\n")
			line := "X-Filler: " + strings.Repeat("a", 1000) + "\r\n"
			for range 2000 { // 2 MB of headers
				if _, err := io.WriteString(c, line); err != nil {
					return
				}
			}
			io.WriteString(c, "Content-Length: 0\r\n\r\n")
		case "/interim":
			for range 100 {
				if _, err := io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
					return
				}
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		default:
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	base := "http://" + ln.Addr().String()
	d := directFor(t, base, nil, nil)
	for _, path := range []string{"/long-head", "/interim"} {
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader("{}"))
		if res, err := d.RoundTrip(req); err == nil {
			res.Body.Close()
			t.Errorf("%s: answered %d, want an error", path, res.StatusCode)
		}
	}
	if got, res := post(t, d, base+"/fine", "{}"); got != "ok" || res.StatusCode != 200 {
		t.Errorf("a plain answer after the refused ones: %d %q", res.StatusCode, got)
	}
}

// serveRaw answers the requests on l's connections by writing raw bytes:
// answer writes what it likes for each request (its body already read), so
// a test can send what no net/http server would.
func serveRaw(l net.Listener, answer func(net.Conn, *http.Request)) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					answer(c, req)
				}
			}()
		}
	}()
}

// writeCounter counts the writes made on a connection.
type writeCounter struct {
	net.Conn
	writes *atomic.Int64
}

func (c writeCounter) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestDirectTransportOneWrite: a request whose head and body fit the
// write buffer goes upstream in one write, not the head first and then
// the body (two wake-ups of the upstream's reader); a larger body still
// arrives whole.
func TestDirectTransportOneWrite(t *testing.T) {
	var got atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(string(b))
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, cannedStream)
	}))
	defer up.Close()
	d := directFor(t, up.URL, nil, nil)
	var writes atomic.Int64
	dial := d.dialContext
	d.dialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeCounter{Conn: c, writes: &writes}, nil
	}
	h := newHarnessURL(t, up.URL, &Options{Transport: d})
	for _, size := range []int{16 << 10, 200 << 10} {
		body := `{"model":"claude-req-model","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"` +
			strings.Repeat("x", size) + `"}]}`
		writes.Store(0)
		resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), body)
		if s := readAll(t, resp.Body); resp.StatusCode != 200 || s != cannedStream {
			t.Fatalf("%d bytes: status %d, body %q", size, resp.StatusCode, s)
		}
		if g, _ := got.Load().(string); g != body {
			t.Fatalf("%d bytes: the upstream read %d bytes, want the %d sent", size, len(g), len(body))
		}
		n := writes.Load()
		if size < 64<<10 && n != 1 {
			t.Errorf("%d bytes: the request took %d writes, want 1", size, n)
		}
		if size > 64<<10 && n < 2 {
			t.Errorf("%d bytes: the request took %d writes, more than the buffer holds in one", size, n)
		}
	}
}
