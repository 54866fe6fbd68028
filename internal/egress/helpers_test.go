package egress

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/talkide/platform/internal/syncbuf"
)

var testKey = []byte("the egress tests' capability key")

// testCapability mirrors the LocalGatewayProxy's capabilities: an HMAC of
// the conversation id under a key of the process.
func testCapability(conv string) string {
	m := hmac.New(sha256.New, testKey)
	m.Write([]byte(conv))
	return "tlp_" + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// authFor is the Proxy-Authorization of conversation conv.
func authFor(conv string) string { return basic(conv + ":" + testCapability(conv)) }

// greeters serve greeting and the scheme they were reached over, one over
// TLS and one over plain HTTP, until the test ends. Both refuse a request
// that carries a Proxy-Authorization: the proxy must not pass its
// credential on.
func greeters(t *testing.T, greeting string) (secure, plain *httptest.Server) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Proxy-Authorization") != "" {
			http.Error(w, "got Proxy-Authorization", http.StatusTeapot)
			return
		}
		fmt.Fprintf(w, "%s %s", greeting, map[bool]string{true: "https", false: "http"}[r.TLS != nil])
	})
	secure = httptest.NewTLSServer(handler)
	t.Cleanup(secure.Close)
	plain = httptest.NewServer(handler)
	t.Cleanup(plain.Close)
	return secure, plain
}

// logSink collects JSON log lines from any goroutine.
type logSink struct{ syncbuf.Buffer }

// records are the log lines with message msg.
func (l *logSink) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// harness is a running proxy and its log.
type harness struct {
	t    *testing.T
	srv  *Server
	logs *logSink
}

// loopbackAllowList is an allow-list of ports of 127.0.0.1, where a test's
// servers listen: a private address, so each entry says private.
func loopbackAllowList(ports ...int) string {
	entries := make([]string, len(ports))
	for i, p := range ports {
		entries[i] = fmt.Sprintf(`{"host": "127.0.0.1", "port": %d, "private": true}`, p)
	}
	return `{"allow": [` + strings.Join(entries, ", ") + `]}`
}

// start runs a proxy on loopback with the allow-list allow. Cleanup shuts
// it down and checks that the log holds no credential.
func start(t *testing.T, opts *Options, allow string) *harness {
	t.Helper()
	list, err := ParseAllowList([]byte(allow))
	if err != nil {
		t.Fatal(err)
	}
	logs := &logSink{}
	var o Options
	if opts != nil {
		o = *opts
	}
	o.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := New(list, testCapability, &o)
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		text := logs.String()
		for _, secret := range []string{"tlp_", "Basic ", "Proxy-Authorization"} {
			if strings.Contains(text, secret) {
				t.Errorf("the log contains %q:\n%s", secret, text)
			}
		}
	})
	return &harness{t: t, srv: s, logs: logs}
}

// dial opens a connection to the proxy, closed at cleanup.
func (h *harness) dial() net.Conn {
	h.t.Helper()
	c, err := net.Dial("tcp", h.srv.Addr().String())
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

// connect sends CONNECT authority with Proxy-Authorization auth ("" for
// none) and early, bytes sent right behind the request, and reads the
// answer. For a 200 the connection is then the tunnel, read through br.
func (h *harness) connect(authority, auth string, early ...byte) (c net.Conn, br *bufio.Reader, resp *http.Response, body string) {
	h.t.Helper()
	c = h.dial()
	req := "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n"
	if auth != "" {
		req += "Proxy-Authorization: " + auth + "\r\n"
	}
	if _, err := c.Write(append([]byte(req+"\r\n"), early...)); err != nil {
		h.t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	br = bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		h.t.Fatalf("CONNECT %s: %v", authority, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
	}
	return c, br, resp, body
}

// mustTunnel is connect that must succeed.
func (h *harness) mustTunnel(authority, conv string) (net.Conn, *bufio.Reader) {
	h.t.Helper()
	c, br, resp, body := h.connect(authority, authFor(conv))
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("CONNECT %s as %s: %s %s", authority, conv, resp.Status, body)
	}
	return c, br
}

// raw sends a raw request to the proxy and reads the answer.
func (h *harness) raw(req string) (*http.Response, string) {
	h.t.Helper()
	c := h.dial()
	if _, err := io.WriteString(c, req); err != nil {
		h.t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		h.t.Fatalf("%q: %v", req, err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// tcpServer is a TCP server on loopback that runs handle for each
// connection and counts them; cleanup closes it and waits for the handlers.
type tcpServer struct {
	port     int
	accepted atomic.Int64
}

func newTCPServer(t *testing.T, handle func(net.Conn)) *tcpServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &tcpServer{port: ln.Addr().(*net.TCPAddr).Port}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn // guarded by mu
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	return s
}

// echoServer echoes what it reads and closes when the client's side ends.
func echoServer(t *testing.T) *tcpServer {
	return newTCPServer(t, func(c net.Conn) { io.Copy(c, c) })
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// fakeResolver answers from its map, and "not found" for any other name.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}
