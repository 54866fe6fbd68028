package gateway

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/slowbody"
)

// TestSlowBodyCut: a worker (or whatever holds a token) that trickles a
// request body one byte at a time, which would take 10 s, is answered and
// disconnected soon after Options.BodyTimeout (300 ms here), authorised or
// not; the upstream never sees the call.
func TestSlowBodyCut(t *testing.T) {
	const (
		timeout = 300 * time.Millisecond
		size    = 100
		every   = 100 * time.Millisecond
		within  = 3 * time.Second
	)
	up, hits := countedAnthropic(8)
	h := newHarness(t, up, &Options{BodyTimeout: timeout})
	addr := strings.TrimPrefix(strings.TrimSuffix(h.url, Prefix), "http://")
	for name, tc := range map[string]struct {
		token  string
		status int
	}{
		"authorised": {h.mint(convA), http.StatusBadRequest},
		"no token":   {"", http.StatusUnauthorized},
	} {
		t.Run(name, func(t *testing.T) {
			head := fmt.Sprintf("POST %s/v1/messages HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", Prefix, addr, size)
			if tc.token != "" {
				head += "X-Worker-Token: " + tc.token + "\r\n"
			}
			resp, body := slowbody.Send(t, addr, head+"\r\n", ' ', size, every, timeout+within)
			if resp.StatusCode != tc.status || !strings.Contains(string(body), `"type":"error"`) {
				t.Errorf("status %d, body %s; want %d in Anthropic's shape", resp.StatusCode, body, tc.status)
			}
			h.waitServed(t)
		})
	}
	if len(hits) != 0 {
		t.Errorf("%d trickled calls reached the upstream", len(hits))
	}
}

// TestBodyTimeoutSparesTheStream: the body's deadline ends with the body;
// a stream that takes four times BodyTimeout reaches the client whole.
func TestBodyTimeoutSparesTheStream(t *testing.T) {
	const events = 12
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := range events {
			<-tick.C
			fmt.Fprintf(w, "event: ping\ndata: {\"type\":\"ping\",\"n\":%d}\n\n", i)
			http.NewResponseController(w).Flush()
		}
	}), &Options{BodyTimeout: 300 * time.Millisecond})
	resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), streamBody)
	body := readAll(t, resp.Body)
	h.waitServed(t)
	if resp.StatusCode != http.StatusOK || strings.Count(body, "event: ping") != events {
		t.Errorf("status %d, %d of %d events: %s", resp.StatusCode, strings.Count(body, "event: ping"), events, body)
	}
	select {
	case <-h.gone:
		t.Error("the request's context ended during the stream")
	default:
	}
}
