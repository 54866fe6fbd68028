package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/fakeclock"
)

func TestConnectTunnel(t *testing.T) {
	echo := echoServer(t)
	h := start(t, nil, loopbackAllowList(echo.port))
	dest := fmt.Sprintf("127.0.0.1:%d", echo.port)

	t.Run("echo", func(t *testing.T) {
		c, br := h.mustTunnel(dest, "conv-a")
		if _, err := io.WriteString(c, "hello tunnel"); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len("hello tunnel"))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != "hello tunnel" {
			t.Fatalf("echo = %q, %v", got, err)
		}
		// A half-close reaches the destination, whose answer to it (its own
		// close) reaches the client.
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		rest, err := io.ReadAll(br)
		if err != nil || len(rest) != 0 {
			t.Fatalf("after CloseWrite: %q, %v; want a clean end", rest, err)
		}
		st := h.srv.Stats()
		if st.OpenTunnels != 0 || st.Tunnels != 1 || st.BytesUp != 12 || st.BytesDown != 12 {
			t.Errorf("stats = %+v, want no tunnel open, 1 opened, 12 bytes each way", st)
		}
	})

	t.Run("bytes sent before the answer", func(t *testing.T) {
		// A client may send its TLS ClientHello right behind the CONNECT.
		c, br, resp, body := h.connect(dest, authFor("conv-a"), []byte("early bytes")...)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s", resp.Status, body)
		}
		got := make([]byte, len("early bytes"))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != "early bytes" {
			t.Fatalf("echo = %q, %v", got, err)
		}
		c.Close()
	})

	t.Run("IPv4-mapped spelling of the allowed address", func(t *testing.T) {
		c, _ := h.mustTunnel(fmt.Sprintf("[::ffff:127.0.0.1]:%d", echo.port), "conv-a")
		c.Close()
	})
}

func TestConnectRefused(t *testing.T) {
	echo := echoServer(t)
	other := closedPort(t)
	h := start(t, &Options{AllowListName: "the test's list (--egress-allow)"},
		fmt.Sprintf(`{"allow": [{"host": "127.0.0.1", "port": %d, "private": true}, "registry.npmjs.org"]}`, echo.port))
	tests := map[string]struct {
		authority string
		host      string
		port      int
	}{
		"another port":                  {authority: fmt.Sprintf("127.0.0.1:%d", other), host: "127.0.0.1", port: other},
		"another host":                  {authority: "registry.example:443", host: "registry.example", port: 443},
		"a name of the allowed address": {authority: fmt.Sprintf("localhost:%d", echo.port), host: "localhost", port: echo.port},
		"an allowed name, other port":   {authority: "registry.npmjs.org:8443", host: "registry.npmjs.org", port: 8443},
		"another loopback address":      {authority: fmt.Sprintf("127.0.0.2:%d", echo.port), host: "127.0.0.2", port: echo.port},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := len(h.logs.records(t, "egress: request refused"))
			_, _, resp, body := h.connect(tc.authority, authFor("conv-refused"))
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("CONNECT %s: %s, want 403", tc.authority, resp.Status)
			}
			for _, want := range []string{"not on the egress allow-list", "the test's list (--egress-allow)", tc.host} {
				if !strings.Contains(body, want) {
					t.Errorf("body %q does not say %q", body, want)
				}
			}
			recs := h.logs.records(t, "egress: request refused")
			if len(recs) != before+1 {
				t.Fatalf("%d refusal lines, want %d", len(recs), before+1)
			}
			rec := recs[len(recs)-1]
			want := map[string]any{"conversation": "conv-refused", "host": tc.host, "port": float64(tc.port), "reason": "not_allowed", "level": "WARN"}
			for k, v := range want {
				if rec[k] != v {
					t.Errorf("log field %s = %v, want %v (%v)", k, rec[k], v, rec)
				}
			}
		})
	}
	if n := echo.accepted.Load(); n != 0 {
		t.Errorf("the allowed destination got %d connections from refused requests", n)
	}
	if st := h.srv.Stats(); st.Refused != uint64(len(tests)) {
		t.Errorf("Refused = %d, want %d", st.Refused, len(tests))
	}
}

func TestAuthentication(t *testing.T) {
	echo := echoServer(t)
	h := start(t, nil, loopbackAllowList(echo.port))
	dest := fmt.Sprintf("127.0.0.1:%d", echo.port)
	tests := map[string]struct {
		auth   string
		reason string
	}{
		"none":                            {auth: "", reason: reasonNoCredential},
		"A's capability with B's id":      {auth: basic("conv-b:" + testCapability("conv-a")), reason: reasonBadCapability},
		"a wrong capability":              {auth: basic("conv-a:tlp_wrong"), reason: reasonBadCapability},
		"the capability with a byte more": {auth: basic("conv-a:" + testCapability("conv-a") + "x"), reason: reasonBadCapability},
		"the capability as a bearer":      {auth: "Bearer " + testCapability("conv-a"), reason: reasonMalformedCredential},
		"the capability alone":            {auth: basic(testCapability("conv-a")), reason: reasonMalformedCredential},
		"an invalid conversation id":      {auth: basic("conv/a:" + testCapability("conv/a")), reason: reasonMalformedCredential},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, _, resp, body := h.connect(dest, tc.auth)
			if resp.StatusCode != http.StatusProxyAuthRequired {
				t.Fatalf("%s, want 407", resp.Status)
			}
			if pa := resp.Header.Get("Proxy-Authenticate"); !strings.HasPrefix(pa, "Basic ") {
				t.Errorf("Proxy-Authenticate = %q", pa)
			}
			if !strings.Contains(body, "proxy authentication required") {
				t.Errorf("body = %q", body)
			}
			recs := h.logs.records(t, "egress: proxy authentication failed")
			rec := recs[len(recs)-1]
			if rec["reason"] != tc.reason {
				t.Errorf("logged reason %v, want %s", rec["reason"], tc.reason)
			}
			if _, ok := rec["conversation"]; ok {
				t.Errorf("the line names the conversation the request claims: %v", rec)
			}
		})
	}
	t.Run("plain HTTP", func(t *testing.T) {
		resp, _ := h.raw(fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", dest, dest, basic("conv-b:"+testCapability("conv-a"))))
		if resp.StatusCode != http.StatusProxyAuthRequired {
			t.Fatalf("%s, want 407", resp.Status)
		}
	})
	if n := echo.accepted.Load(); n != 0 {
		t.Errorf("the destination got %d connections from unauthenticated requests", n)
	}
	if st := h.srv.Stats(); st.Unauthenticated != uint64(len(tests)+1) {
		t.Errorf("Unauthenticated = %d, want %d", st.Unauthenticated, len(tests)+1)
	}
}

// A capability function that has nothing for a conversation authenticates
// no one, whatever is presented.
func TestEmptyCapabilityAuthenticatesNoOne(t *testing.T) {
	s := New(nil, func(string) string { return "" }, nil)
	r := httptest.NewRequest(http.MethodConnect, "http://127.0.0.1:1", nil)
	r.Header.Set("Proxy-Authorization", basic("conv-a:x"))
	if _, reason := s.authenticate(r); reason != reasonBadCapability {
		t.Errorf("reason = %q, want %s", reason, reasonBadCapability)
	}
}

func TestNonPublicDestinations(t *testing.T) {
	// The destination answers a plain-HTTP request and echoes a tunnel's bytes.
	echo := newTCPServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if b, _ := br.Peek(4); string(b) == "GET " {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
			return
		}
		io.Copy(c, br)
	})
	p := echo.port
	resolver := fakeResolver{
		"registry.test":  addrs("127.0.0.1"),
		"private.test":   addrs("127.0.0.1"),
		"mapped.test":    addrs("::ffff:127.0.0.1"),
		"mixed.test":     addrs("10.0.0.1", "127.0.0.1"),
		"metadata.test":  addrs("169.254.169.254"),
		"nat64.test":     addrs("64:ff9b::7f00:1"),
		"ula.test":       addrs("fd00::1"),
		"nothing.test":   nil,
		"unspecif.test":  addrs("0.0.0.0"),
		"multicast.test": addrs("224.0.0.251"),
	}
	h := start(t, &Options{Resolver: resolver, LogBurst: 1000}, fmt.Sprintf(`{"allow": [
		"registry.test:%[1]d", {"host": "private.test", "port": %[1]d, "private": true},
		"mapped.test:%[1]d", "mixed.test:%[1]d", "metadata.test:%[1]d", "nat64.test:%[1]d",
		"ula.test:%[1]d", "missing.test:%[1]d", "nothing.test:%[1]d", "unspecif.test:%[1]d",
		"multicast.test:%[1]d", "127.0.0.1:%[1]d"]}`, p))
	tests := map[string]struct {
		host       string
		wantStatus int
		wantReason string
	}{
		"a name resolving to loopback":     {host: "registry.test", wantStatus: 403, wantReason: reasonNonPublic},
		"to IPv4-mapped loopback":          {host: "mapped.test", wantStatus: 403, wantReason: reasonNonPublic},
		"to private and loopback":          {host: "mixed.test", wantStatus: 403, wantReason: reasonNonPublic},
		"to the metadata address":          {host: "metadata.test", wantStatus: 403, wantReason: reasonNonPublic},
		"to NAT64 loopback":                {host: "nat64.test", wantStatus: 403, wantReason: reasonNonPublic},
		"to a unique local address":        {host: "ula.test", wantStatus: 403, wantReason: reasonNonPublic},
		"to the unspecified address":       {host: "unspecif.test", wantStatus: 403, wantReason: reasonNonPublic},
		"to a multicast address":           {host: "multicast.test", wantStatus: 403, wantReason: reasonNonPublic},
		"a loopback literal, not private":  {host: "127.0.0.1", wantStatus: 403, wantReason: reasonNonPublic},
		"a name that does not resolve":     {host: "missing.test", wantStatus: 502, wantReason: reasonUnresolvable},
		"a name with no address":           {host: "nothing.test", wantStatus: 502, wantReason: reasonUnresolvable},
		"a private name, marked private":   {host: "private.test", wantStatus: 200},
		"a name of loopback over HTTP":     {host: "registry.test", wantStatus: 403, wantReason: reasonNonPublic},
		"a private name over HTTP":         {host: "private.test", wantStatus: 200},
		"a loopback literal over HTTP":     {host: "127.0.0.1", wantStatus: 403, wantReason: reasonNonPublic},
		"an unresolvable name over HTTP":   {host: "missing.test", wantStatus: 502, wantReason: reasonUnresolvable},
		"an IPv4-mapped literal over HTTP": {host: "[::ffff:127.0.0.1]", wantStatus: 403, wantReason: reasonNonPublic},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			authority := fmt.Sprintf("%s:%d", tc.host, p)
			before := len(h.logs.records(t, "egress: request refused"))
			var status int
			var body string
			if strings.HasSuffix(name, "over HTTP") {
				var resp *http.Response
				resp, body = h.raw(fmt.Sprintf("GET http://%s/x HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", authority, authority, authFor("conv-ssrf")))
				status = resp.StatusCode
			} else {
				c, _, resp, b := h.connect(authority, authFor("conv-ssrf"))
				status, body = resp.StatusCode, b
				c.Close()
			}
			if status != tc.wantStatus {
				t.Fatalf("%s: %d %s, want %d", authority, status, body, tc.wantStatus)
			}
			if tc.wantReason == "" {
				return
			}
			if tc.wantReason == reasonNonPublic && !strings.Contains(body, `"private": true`) {
				t.Errorf("body %q does not say how to allow it", body)
			}
			recs := h.logs.records(t, "egress: request refused")
			if len(recs) != before+1 {
				t.Fatalf("%d refusal lines, want %d", len(recs), before+1)
			}
			if rec := recs[len(recs)-1]; rec["reason"] != tc.wantReason || rec["conversation"] != "conv-ssrf" {
				t.Errorf("log line %v, want reason %s for conv-ssrf", rec, tc.wantReason)
			}
		})
	}
	// Only the two requests marked private reached the destination (the
	// plain-HTTP one got whatever an echo server answers).
	if n := echo.accepted.Load(); n != 2 {
		t.Errorf("the loopback destination got %d connections, want 2", n)
	}
}

func TestUpstreamUnreachable(t *testing.T) {
	port := closedPort(t)
	h := start(t, nil, loopbackAllowList(port))
	_, _, resp, body := h.connect(fmt.Sprintf("127.0.0.1:%d", port), authFor("conv-a"))
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "could not be reached") {
		t.Fatalf("%s %q, want 502", resp.Status, body)
	}
	recs := h.logs.records(t, "egress: request refused")
	if len(recs) != 1 || recs[0]["reason"] != reasonUpstreamFailed || recs[0]["conversation"] != "conv-a" {
		t.Errorf("log = %v", recs)
	}
	if st := h.srv.Stats(); st.UpstreamFailures != 1 || st.OpenTunnels != 0 {
		t.Errorf("stats = %+v", st)
	}
}

// recorded is a request as a destination saw it.
type recorded struct {
	Method, URI, Host, Body string
	Header                  http.Header
}

func recordingServer(t *testing.T) (*httptest.Server, func() []recorded) {
	var mu sync.Mutex
	var got []recorded // guarded by mu
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, recorded{Method: r.Method, URI: r.RequestURI, Host: r.Host, Body: string(b), Header: r.Header.Clone()})
		mu.Unlock()
		w.Header().Set("X-Upstream", "yes")
		io.WriteString(w, "hello from upstream")
	}))
	t.Cleanup(srv.Close)
	return srv, func() []recorded {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

func TestForwardHTTP(t *testing.T) {
	up, seen := recordingServer(t)
	host := up.Listener.Addr().String()
	port := up.Listener.Addr().(*net.TCPAddr).Port
	h := start(t, nil, loopbackAllowList(port))

	req := "POST http://" + host + "/path?q=1 HTTP/1.1\r\n" +
		"Host: " + host + "\r\n" +
		"Proxy-Authorization: " + authFor("conv-a") + "\r\n" +
		"Proxy-Connection: keep-alive\r\n" +
		"Connection: keep-alive, X-Hop\r\n" +
		"X-Hop: hop value\r\n" +
		"Keep-Alive: timeout=5\r\n" +
		"X-Keep: kept\r\n" +
		"Content-Length: 5\r\n\r\nhello"
	resp, body := h.raw(req)
	if resp.StatusCode != http.StatusOK || body != "hello from upstream" || resp.Header.Get("X-Upstream") != "yes" {
		t.Fatalf("%s %q %v", resp.Status, body, resp.Header)
	}
	got := seen()
	if len(got) != 1 {
		t.Fatalf("upstream saw %d requests", len(got))
	}
	r := got[0]
	if diff := cmp.Diff(recorded{Method: "POST", URI: "/path?q=1", Host: host, Body: "hello"}, recorded{Method: r.Method, URI: r.URI, Host: r.Host, Body: r.Body}); diff != "" {
		t.Errorf("upstream request (-want +got):\n%s", diff)
	}
	if r.Header.Get("X-Keep") != "kept" {
		t.Errorf("an end-to-end header was dropped: %v", r.Header)
	}
	for _, hop := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Hop", "Keep-Alive"} {
		if v, ok := r.Header[hop]; ok {
			t.Errorf("upstream got hop-by-hop header %s: %q", hop, v)
		}
	}
	// The handler counts the request closed once it has returned, which
	// can be just after the client has read the whole answer.
	deadline := time.Now().Add(5 * time.Second)
	for st := h.srv.Stats(); st.OpenRequests != 0 && time.Now().Before(deadline); st = h.srv.Stats() {
		time.Sleep(time.Millisecond) // polling a counter another goroutine lowers
	}
	if st := h.srv.Stats(); st.Requests != 1 || st.OpenRequests != 0 {
		t.Errorf("stats = %+v", st)
	}

	t.Run("no upgrade over plain HTTP", func(t *testing.T) {
		resp, _ := h.raw("GET http://" + host + "/ws HTTP/1.1\r\nHost: " + host + "\r\nProxy-Authorization: " + authFor("conv-a") +
			"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s", resp.Status)
		}
		got := seen()
		if last := got[len(got)-1]; last.Header.Get("Upgrade") != "" {
			t.Errorf("upstream was offered an upgrade: %v", last.Header)
		}
	})
}

// The request body reaches the destination while the client is still
// sending it, and the response reaches the client while the destination is
// still writing it: neither is buffered whole.
func TestForwardStreams(t *testing.T) {
	gotFirst := make(chan struct{})
	sentFirst := make(chan struct{})
	clientGotFirst := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/upload":
			buf := make([]byte, 5)
			if _, err := io.ReadFull(r.Body, buf); err != nil || string(buf) != "first" {
				http.Error(w, "bad first chunk", 400)
				return
			}
			close(gotFirst)
			rest, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s%s", buf, rest)
		case "/download":
			io.WriteString(w, "part one;")
			w.(http.Flusher).Flush()
			close(sentFirst)
			select {
			case <-clientGotFirst:
			case <-r.Context().Done():
				return
			}
			io.WriteString(w, "part two")
		}
	}))
	t.Cleanup(up.Close)
	port := up.Listener.Addr().(*net.TCPAddr).Port
	h := start(t, nil, loopbackAllowList(port))
	proxyURL, _ := url.Parse(h.srv.URLFor("conv-a"))
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 20 * time.Second}
	t.Cleanup(client.CloseIdleConnections)

	t.Run("upload", func(t *testing.T) {
		pr, pw := io.Pipe()
		go func() { // ends when the pipe is closed, on either path
			pw.Write([]byte("first"))
			select {
			case <-gotFirst:
				pw.Write([]byte(" and second"))
				pw.Close()
			case <-time.After(15 * time.Second):
				pw.CloseWithError(errors.New("the destination never got the first chunk: the body was buffered"))
			}
		}()
		resp, err := client.Post(up.URL+"/upload", "text/plain", pr)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if string(b) != "first and second" {
			t.Errorf("echoed %q", b)
		}
	})

	t.Run("download", func(t *testing.T) {
		resp, err := client.Get(up.URL + "/download")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		buf := make([]byte, len("part one;"))
		if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "part one;" {
			t.Fatalf("first part %q, %v", buf, err)
		}
		close(clientGotFirst)
		rest, _ := io.ReadAll(resp.Body)
		if string(rest) != "part two" {
			t.Errorf("rest %q", rest)
		}
	})
}

// Go's own client, configured with the proxy URL, reaches an https
// destination through a tunnel and an http one by forwarding.
func TestGoClient(t *testing.T) {
	var mu sync.Mutex
	var proxyAuthSeen []string // guarded by mu
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		proxyAuthSeen = append(proxyAuthSeen, r.Header.Values("Proxy-Authorization")...)
		mu.Unlock()
		fmt.Fprintf(w, "hello over %s", map[bool]string{true: "https", false: "http"}[r.TLS != nil])
	})
	secure := httptest.NewTLSServer(handler)
	t.Cleanup(secure.Close)
	plain := httptest.NewServer(handler)
	t.Cleanup(plain.Close)
	h := start(t, nil, loopbackAllowList(secure.Listener.Addr().(*net.TCPAddr).Port, plain.Listener.Addr().(*net.TCPAddr).Port))

	proxyURL, err := url.Parse(h.srv.URLFor("conv-go"))
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: secure.Client().Transport.(*http.Transport).TLSClientConfig.Clone()}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	for _, tc := range []struct{ url, want string }{
		{secure.URL + "/a", "hello over https"},
		{plain.URL + "/b", "hello over http"},
		{secure.URL + "/c", "hello over https"}, // a second request on the tunnel
	} {
		resp, err := client.Get(tc.url)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.url, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != tc.want {
			t.Errorf("GET %s: %s %q, want %q", tc.url, resp.Status, b, tc.want)
		}
	}
	if _, err := client.Get("https://registry.example/"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("GET an unlisted host: err = %v, want the proxy's 403", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(proxyAuthSeen) != 0 {
		t.Errorf("a destination saw Proxy-Authorization %d times", len(proxyAuthSeen))
	}
}

func TestTunnelLimits(t *testing.T) {
	echo := echoServer(t)
	h := start(t, &Options{MaxTunnelsPerConversation: 1, MaxTunnels: 2}, loopbackAllowList(echo.port))
	dest := fmt.Sprintf("127.0.0.1:%d", echo.port)

	a1, a1r := h.mustTunnel(dest, "conv-a")
	_, _, resp, body := h.connect(dest, authFor("conv-a"))
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a second tunnel of conv-a: %s (Retry-After %q) %s, want 429 with Retry-After", resp.Status, resp.Header.Get("Retry-After"), body)
	}
	h.mustTunnel(dest, "conv-b")
	_, _, resp, body = h.connect(dest, authFor("conv-c"))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a third tunnel in all: %s (Retry-After %q) %s, want 503 with Retry-After", resp.Status, resp.Header.Get("Retry-After"), body)
	}
	// A plain-HTTP request holds a connection too.
	resp, _ = h.raw(fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", dest, dest, authFor("conv-d")))
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("plain HTTP over the limit: %s, want 503", resp.Status)
	}

	// Closing a tunnel frees its slot before the client sees it closed.
	a1.(*net.TCPConn).CloseWrite()
	if _, err := io.ReadAll(a1r); err != nil {
		t.Fatal(err)
	}
	h.mustTunnel(dest, "conv-a")

	var reasons []string
	for _, rec := range h.logs.records(t, "egress: request refused") {
		reasons = append(reasons, fmt.Sprint(rec["conversation"], " ", rec["reason"]))
	}
	want := []string{"conv-a " + reasonConversationLimit, "conv-c " + reasonTotalLimit, "conv-d " + reasonTotalLimit}
	if diff := cmp.Diff(want, reasons); diff != "" {
		t.Errorf("refusals logged (-want +got):\n%s", diff)
	}
	if st := h.srv.Stats(); st.Limited != 3 || st.OpenTunnels != 2 || st.Tunnels != 3 {
		t.Errorf("stats = %+v", st)
	}
}

func TestIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond

	t.Run("a silent client", func(t *testing.T) {
		echo := echoServer(t)
		h := start(t, &Options{IdleTimeout: idle}, loopbackAllowList(echo.port))
		began := time.Now()
		_, br := h.mustTunnel(fmt.Sprintf("127.0.0.1:%d", echo.port), "conv-a")
		rest, err := io.ReadAll(br) // the helper's read deadline fails the test if the tunnel stays
		if err != nil || len(rest) != 0 {
			t.Fatalf("read %q, %v; want the proxy to close the tunnel", rest, err)
		}
		if d := time.Since(began); d < idle {
			t.Errorf("closed after %v, before the idle timeout %v", d, idle)
		}
		if st := h.srv.Stats(); st.OpenTunnels != 0 {
			t.Errorf("OpenTunnels = %d after the close", st.OpenTunnels)
		}
	})

	t.Run("a client that stops reading", func(t *testing.T) {
		flooded := make(chan struct{})
		flood := newTCPServer(t, func(c net.Conn) {
			defer close(flooded)
			buf := make([]byte, 64<<10)
			for {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		})
		h := start(t, &Options{IdleTimeout: idle}, loopbackAllowList(flood.port))
		began := time.Now()
		h.mustTunnel(fmt.Sprintf("127.0.0.1:%d", flood.port), "conv-a")
		select {
		case <-flooded: // the proxy closed the destination's connection
		case <-time.After(20 * time.Second):
			t.Fatal("the tunnel of a client that reads nothing is still open")
		}
		if d := time.Since(began); d < idle {
			t.Errorf("closed after %v, before the idle timeout %v", d, idle)
		}
		if st := h.srv.Stats(); st.OpenTunnels != 0 {
			t.Errorf("OpenTunnels = %d after the close", st.OpenTunnels)
		}
	})

	t.Run("a download is not idle", func(t *testing.T) {
		const ticks = 12
		trickle := newTCPServer(t, func(c net.Conn) {
			tick := time.NewTicker(idle / 6)
			defer tick.Stop()
			for range ticks {
				<-tick.C
				if _, err := c.Write([]byte{'x'}); err != nil {
					return
				}
			}
		})
		h := start(t, &Options{IdleTimeout: idle}, loopbackAllowList(trickle.port))
		_, br := h.mustTunnel(fmt.Sprintf("127.0.0.1:%d", trickle.port), "conv-a")
		got, err := io.ReadAll(br)
		if err != nil || len(got) != ticks {
			t.Errorf("read %d bytes, %v; want all %d (the client's silent direction must not end the tunnel)", len(got), err, ticks)
		}
	})

	t.Run("a silent destination of a plain-HTTP request", func(t *testing.T) {
		silent := newTCPServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
		h := start(t, &Options{IdleTimeout: idle}, loopbackAllowList(silent.port))
		dest := fmt.Sprintf("127.0.0.1:%d", silent.port)
		resp, body := h.raw(fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", dest, dest, authFor("conv-a")))
		if resp.StatusCode != http.StatusGatewayTimeout {
			t.Errorf("%s %q, want 504", resp.Status, body)
		}
		if st := h.srv.Stats(); st.OpenRequests != 0 {
			t.Errorf("OpenRequests = %d", st.OpenRequests)
		}
	})
}

func TestShutdownClosesTunnels(t *testing.T) {
	echo := echoServer(t)
	h := start(t, nil, loopbackAllowList(echo.port))
	dest := fmt.Sprintf("127.0.0.1:%d", echo.port)
	c1, br1 := h.mustTunnel(dest, "conv-a")
	_, br2 := h.mustTunnel(dest, "conv-b")
	io.WriteString(c1, "ping")
	if _, err := io.ReadFull(br1, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	for i, br := range []*bufio.Reader{br1, br2} {
		if _, err := io.ReadAll(br); isTimeout(err) {
			t.Errorf("tunnel %d still open after Shutdown", i+1)
		}
	}
	if st := h.srv.Stats(); st.OpenTunnels != 0 {
		t.Errorf("OpenTunnels = %d after Shutdown", st.OpenTunnels)
	}
	if c, err := net.Dial("tcp", h.srv.Addr().String()); err == nil {
		c.Close()
		t.Error("the proxy still accepts connections after Shutdown")
	}
	if err := h.srv.Listen("127.0.0.1:0"); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Listen after Shutdown: %v, want ErrServerClosed", err)
	}
}

func TestHeaderLimit(t *testing.T) {
	h := start(t, &Options{MaxHeaderBytes: 4 << 10}, `{"allow": []}`)
	resp, _ := h.raw("CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\nX-Big: " + strings.Repeat("x", 16<<10) + "\r\n\r\n")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("%s, want 431", resp.Status)
	}
}

func TestNotProxyRequests(t *testing.T) {
	h := start(t, nil, `{"allow": ["registry.example"]}`)
	auth := "Proxy-Authorization: " + authFor("conv-a") + "\r\n"
	tests := map[string]struct {
		req  string
		want string // in the body
	}{
		"origin form":        {req: "GET / HTTP/1.1\r\nHost: registry.example\r\n" + auth + "\r\n", want: "forward proxy"},
		"https by forward":   {req: "GET https://registry.example/ HTTP/1.1\r\nHost: registry.example\r\n" + auth + "\r\n", want: "CONNECT"},
		"CONNECT no port":    {req: "CONNECT registry.example HTTP/1.1\r\nHost: registry.example\r\n" + auth + "\r\n", want: "no port"},
		"CONNECT zero port":  {req: "CONNECT registry.example:0 HTTP/1.1\r\nHost: registry.example\r\n" + auth + "\r\n", want: `port "0"`},
		"CONNECT decimal IP": {req: "CONNECT 2130706433:443 HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", want: "neither an IP address nor a host name"},
		"ftp URL":            {req: "GET ftp://registry.example/ HTTP/1.1\r\nHost: registry.example\r\n" + auth + "\r\n", want: "only http://"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			resp, body := h.raw(tc.req)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, tc.want) {
				t.Errorf("%s %q, want 400 saying %q", resp.Status, body, tc.want)
			}
		})
	}
	if st := h.srv.Stats(); st.BadRequests != uint64(len(tests)) || st.Refused != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestRefusalLogIsRateLimited(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	h := start(t, &Options{LogBurst: 3, LogInterval: time.Minute, Now: clock.Now}, `{"allow": []}`)
	refuse := func(conv string) {
		t.Helper()
		_, _, resp, _ := h.connect("registry.example:443", authFor(conv))
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%s, want 403", resp.Status)
		}
	}
	for range 10 {
		refuse("conv-loop")
	}
	refuse("conv-other")
	clock.Advance(2 * time.Minute)
	refuse("conv-loop")

	var got []string
	for _, rec := range h.logs.records(t, "egress: request refused") {
		got = append(got, fmt.Sprint(rec["conversation"], " suppressed=", rec["suppressed"]))
	}
	want := []string{
		"conv-loop suppressed=<nil>", "conv-loop suppressed=<nil>", "conv-loop suppressed=<nil>",
		"conv-other suppressed=<nil>",
		"conv-loop suppressed=7",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("refusal lines (-want +got):\n%s", diff)
	}
	if st := h.srv.Stats(); st.Refused != 12 {
		t.Errorf("Refused = %d, want every refusal counted", st.Refused)
	}
}

// addrListener reports another address than the one it listens on, and
// closes accepting when Accept is first called.
type addrListener struct {
	net.Listener
	addr      net.Addr
	once      sync.Once
	accepting chan struct{}
}

func (l *addrListener) Addr() net.Addr { return l.addr }

func (l *addrListener) Accept() (net.Conn, error) {
	l.once.Do(func() { close(l.accepting) })
	return l.Listener.Accept()
}

func TestURLForAndEnv(t *testing.T) {
	h := start(t, nil, `{"allow": []}`)
	u, err := url.Parse(h.srv.URLFor("conv-a"))
	if err != nil {
		t.Fatal(err)
	}
	pass, _ := u.User.Password()
	if diff := cmp.Diff([]string{"http", "conv-a", testCapability("conv-a"), h.srv.Addr().String()}, []string{u.Scheme, u.User.Username(), pass, u.Host}); diff != "" {
		t.Errorf("URLFor (-want +got):\n%s", diff)
	}
	env := h.srv.Env("conv-a")
	for _, want := range []string{"HTTPS_PROXY=" + u.String(), "http_proxy=" + u.String(), "NO_PROXY=127.0.0.1,localhost,::1"} {
		if !slices.Contains(env, want) {
			t.Errorf("Env lacks %q: %q", want, env)
		}
	}

	// A proxy serving on every interface is reached on loopback.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(nil, testCapability, nil)
	served := make(chan error, 1)
	al := &addrListener{Listener: ln, addr: &net.TCPAddr{IP: net.IPv4zero, Port: 4321}, accepting: make(chan struct{})}
	go func() { served <- s.Serve(al) }()
	<-al.accepting // Serve has recorded the address by then
	if got := s.URLFor("c"); !strings.HasSuffix(got, "@127.0.0.1:4321") {
		t.Errorf("URLFor = %q, want loopback", got)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve after Shutdown: %v, want nil", err)
	}
}

func TestNewPanicsWithoutCapability(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New(nil capability) did not panic")
		}
	}()
	New(nil, nil, nil)
}
