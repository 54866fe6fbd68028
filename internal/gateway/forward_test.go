package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestForwardHeaders: what the gateway's own forwarding passes, both ways.
// Up: "TE: trailers" and no User-Agent of Go's when the client sent none.
// Down: hop-by-hop headers, and those the upstream's Connection header
// names, stay behind; the rest and the trailers reach the client.
func TestForwardHeaders(t *testing.T) {
	seen := make(chan http.Header, 1)
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Connection", "X-Upstream-Hop")
		w.Header().Set("X-Upstream-Hop", "for the gateway only")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("Request-Id", "req_1")
		w.Header().Set("Trailer", "X-Checksum")
		w.Write([]byte(cannedJSON))
		w.Header().Set("X-Checksum", "abc")
	}), nil)
	req, err := http.NewRequest(http.MethodPost, h.url+"/v1/messages", strings.NewReader(requestBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = tokenHeader(h.mint(convA))
	req.Header["Te"] = []string{"trailers, deflate"}
	req.Header["User-Agent"] = nil // Go's client then sends none
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp.Body); resp.StatusCode != 200 || body != cannedJSON {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	resp.Body.Close()
	up := <-seen
	if got := up.Get("Te"); got != "trailers" {
		t.Errorf("upstream saw TE %q, want trailers", got)
	}
	if got := up.Get("User-Agent"); got != "" {
		t.Errorf("upstream saw User-Agent %q, want none", got)
	}
	for _, k := range []string{"X-Upstream-Hop", "Keep-Alive"} {
		if v := resp.Header.Get(k); v != "" {
			t.Errorf("client received the hop-by-hop %s: %q", k, v)
		}
	}
	if got := resp.Header.Get("Request-Id"); got != "req_1" {
		t.Errorf("Request-Id = %q, want req_1", got)
	}
	if got := resp.Trailer.Get("X-Checksum"); got != "abc" {
		t.Errorf("trailer X-Checksum = %q, want abc (trailers %v)", got, resp.Trailer)
	}
}

// TestForwardHeadFirst: an upstream that sends its head and then thinks
// has the client see the head at once, not with the first event.
func TestForwardHeadFirst(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(2 * waitLimit): // past the test's own bound
		}
		w.Write([]byte(cannedStream))
	}), nil)
	done := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/messages", strings.NewReader(streamBody))
		req.Header = tokenHeader(h.mint(convA))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			close(done)
			return
		}
		done <- resp
	}()
	select {
	case resp := <-done:
		close(release)
		if resp == nil {
			return
		}
		defer resp.Body.Close()
		if got := readAll(t, resp.Body); got != cannedStream {
			t.Fatalf("body %q", got)
		}
	case <-time.After(waitLimit):
		close(release)
		t.Fatal("the response's head did not reach the client while the upstream held back its body")
	}
}

// TestNoProtocolSwitch: a client's Upgrade does not reach the upstream,
// and an upstream that switches protocols anyway gets its call a 502,
// not a tunnel.
func TestNoProtocolSwitch(t *testing.T) {
	seen := make(chan http.Header, 1)
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		conn, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		bw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tunnel\r\n\r\n")
		bw.Flush()
	}), nil)
	req, err := http.NewRequest(http.MethodPost, h.url+"/v1/messages", strings.NewReader(requestBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = tokenHeader(h.mint(convA))
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tunnel")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := readAll(t, resp.Body)
	if resp.StatusCode != http.StatusBadGateway || decodeError(t, body) != errAPI {
		t.Errorf("got %d %q, want 502 %s", resp.StatusCode, body, errAPI)
	}
	up := <-seen
	for _, k := range []string{"Upgrade", "Connection"} {
		if v := up.Get(k); v != "" {
			t.Errorf("upstream saw %s: %q", k, v)
		}
	}
}
