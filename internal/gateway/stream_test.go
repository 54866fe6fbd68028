package gateway

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/store"
)

// nextEvent reads one SSE event, up to and including its blank line.
func nextEvent(br *bufio.Reader) (string, error) {
	var ev strings.Builder
	for {
		line, err := br.ReadString('\n')
		ev.WriteString(line)
		if err != nil {
			return ev.String(), err
		}
		if line == "\n" {
			return ev.String(), nil
		}
	}
}

func readEvent(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	ev, err := nextEvent(br)
	if err != nil {
		t.Fatalf("reading event: %v (got %q)", err, ev)
	}
	return ev
}

// TestStreamUnbuffered proves that events pass through at once: the upstream
// sends its first event and then holds the rest until the test has read that
// event from the gateway.
func TestStreamUnbuffered(t *testing.T) {
	gate := make(chan struct{})
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, cannedEvents[0])
		w.(http.Flusher).Flush()
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		for _, ev := range cannedEvents[1:] {
			io.WriteString(w, ev)
			w.(http.Flusher).Flush()
		}
	}), nil)

	resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), streamBody)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("got %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(resp.Body)
	first := make(chan string, 1)
	go func() {
		ev, _ := nextEvent(br)
		first <- ev
	}()
	select {
	case ev := <-first:
		if ev != cannedEvents[0] {
			t.Fatalf("first event = %q, want %q", ev, cannedEvents[0])
		}
	case <-time.After(waitLimit):
		close(gate)
		t.Fatal("the first event did not arrive while the upstream held the rest: the gateway buffers")
	}
	close(gate)
	if got := cannedEvents[0] + readAll(t, br); got != cannedStream {
		t.Errorf("stream changed in passing:\n got %q\nwant %q", got, cannedStream)
	}
	checkRecord(t, recordOf(convA, 200, true, cannedStreamUsage), h.recordFor(t))
}

func TestUsageRecorded(t *testing.T) {
	tests := map[string]struct {
		path, body string
		want       store.UsageRecord
		wantBody   string
	}{
		"json": {
			path: "/v1/messages", body: requestBody,
			want: recordOf(convA, 200, false, cannedJSONUsage), wantBody: cannedJSON,
		},
		"stream": {
			path: "/v1/messages", body: streamBody,
			want: recordOf(convA, 200, true, cannedStreamUsage), wantBody: cannedStream,
		},
		"count tokens": {
			path: "/v1/messages/count_tokens", body: requestBody,
			want: recordOf(convA, 200, false, usage{Model: "claude-req-model"}), wantBody: `{"input_tokens":42}`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, fakeAnthropic(), nil)
			resp := h.post(t, tc.path, tokenHeader(h.mint(convA)), tc.body)
			if got := readAll(t, resp.Body); resp.StatusCode != 200 || got != tc.wantBody {
				t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, got, tc.wantBody)
			}
			checkRecord(t, tc.want, h.recordFor(t))
			h.waitServed(t)
			h.flush(t)
			if n := len(h.store.records()); n != 1 {
				t.Errorf("%d records, want 1", n)
			}
		})
	}
}

// TestUpstreamErrors: upstream errors reach the client unchanged and are
// recorded, with usage only if the error reports some.
func TestUpstreamErrors(t *testing.T) {
	tests := map[string]struct {
		status int
		header http.Header
		body   string
		usage  usage
	}{
		"429": {
			status: 429,
			header: http.Header{"Retry-After": {"17"}, "Content-Type": {"application/json"}, "Anthropic-Ratelimit-Requests-Remaining": {"0"}},
			body:   `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`,
		},
		"500": {
			status: 500,
			header: http.Header{"Content-Type": {"application/json"}},
			body:   `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`,
		},
		"529": {
			status: 529,
			header: http.Header{"Content-Type": {"application/json"}},
			body:   `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
		},
		"502 html": {
			status: 502,
			header: http.Header{"Content-Type": {"text/html"}},
			body:   "<html>bad gateway</html>",
		},
		"400 with usage": {
			status: 400,
			header: http.Header{"Content-Type": {"application/json"}},
			body:   `{"type":"error","error":{"type":"invalid_request_error","message":"x"},"usage":{"input_tokens":7}}`,
			usage:  usage{InputTokens: 7},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, vs := range tc.header {
					w.Header()[k] = vs
				}
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			}), nil)
			resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), requestBody)
			if got := readAll(t, resp.Body); resp.StatusCode != tc.status || got != tc.body {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, got, tc.status, tc.body)
			}
			for k, vs := range tc.header {
				if got := resp.Header.Values(k); strings.Join(got, ",") != strings.Join(vs, ",") {
					t.Errorf("header %s = %q, want %q", k, got, vs)
				}
			}
			u := tc.usage
			u.Model = "claude-req-model"
			checkRecord(t, recordOf(convA, tc.status, false, u), h.recordFor(t))
		})
	}
}

// TestStreamErrorEvent: an error event mid-stream passes through; the usage
// seen before it is recorded.
func TestStreamErrorEvent(t *testing.T) {
	errEvent := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	stream := cannedEvents[0] + cannedEvents[1] + errEvent
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, stream)
	}), nil)
	resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convB)), streamBody)
	if got := readAll(t, resp.Body); got != stream {
		t.Errorf("got %q, want %q", got, stream)
	}
	checkRecord(t, recordOf(convB, 200, true, cannedStartUsage), h.recordFor(t))
}

// postCancellable posts body to /v1/messages as convA under ctx: cancelling
// ctx is the client going away.
func postCancellable(ctx context.Context, t *testing.T, h *harness, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url+"/v1/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Worker-Token", h.mint(convA))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// disconnectAfterFirst sends streamBody as convA, reads the first event and
// goes away.
func disconnectAfterFirst(t *testing.T, h *harness) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp := postCancellable(ctx, t, h, streamBody)
	defer resp.Body.Close()
	if ev := readEvent(t, bufio.NewReader(resp.Body)); ev != cannedEvents[0] {
		t.Fatalf("first event = %q", ev)
	}
}

// pausingUpstream sends the first four canned events, flushed, then calls
// pause; unless pause says to stop, it sends the rest, flushing each.
func pausingUpstream(pause func(w http.ResponseWriter, r *http.Request) (more bool)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range cannedEvents[:4] {
			io.WriteString(w, ev)
		}
		w.(http.Flusher).Flush()
		if !pause(w, r) {
			return
		}
		for _, ev := range cannedEvents[4:] {
			io.WriteString(w, ev)
			w.(http.Flusher).Flush()
		}
	})
}

// wantChargedOnce checks that convA's call was recorded with the whole
// stream's usage, and by one record only.
func wantChargedOnce(t *testing.T, h *harness) {
	t.Helper()
	checkRecord(t, recordOf(convA, 200, true, cannedStreamUsage), h.recordFor(t))
	h.waitServed(t)
	h.flush(t)
	if n := len(h.store.records()); n != 1 {
		t.Errorf("%d records, want exactly 1", n)
	}
}

// TestClientDisconnect: a client that goes away mid-stream is charged for
// what the upstream produced: the gateway reads the rest of the stream, and
// records the final usage, exactly once.
func TestClientDisconnect(t *testing.T) {
	var h *harness
	h = newHarness(t, pausingUpstream(func(w http.ResponseWriter, r *http.Request) bool {
		select {
		case <-h.gone: // the client is gone: the rest is only for the meter
			return true
		case <-r.Context().Done():
			t.Error("the upstream call was cancelled when the client went away")
			return false
		}
	}), nil)
	disconnectAfterFirst(t, h)
	wantChargedOnce(t, h)
}

// TestClientDisconnectWhileStreaming: a client that goes away while the
// upstream keeps sending is noticed (a write to it fails, or the server's
// watch of the connection sees it gone); the call is then charged for the
// whole stream, once.
func TestClientDisconnectWhileStreaming(t *testing.T) {
	closed := make(chan struct{})
	h := newHarness(t, pausingUpstream(func(w http.ResponseWriter, r *http.Request) bool {
		<-closed
		// Pings until the gateway has failed a write and stopped
		// relaying (its call is cancelled only after the drain timeout).
		for range 50 {
			io.WriteString(w, cannedEvents[2])
			w.(http.Flusher).Flush()
			time.Sleep(2 * time.Millisecond)
		}
		return true
	}), nil)
	disconnectAfterFirst(t, h)
	close(closed)
	wantChargedOnce(t, h)
}

// TestClientDisconnectDrainTimeout: when the upstream does not finish within
// the drain timeout after the client went away, the upstream call is
// cancelled and what had passed is recorded.
func TestClientDisconnectDrainTimeout(t *testing.T) {
	upstreamGone := make(chan struct{})
	h := newHarness(t, pausingUpstream(func(w http.ResponseWriter, r *http.Request) bool {
		<-r.Context().Done()
		close(upstreamGone)
		return false
	}), &Options{DrainTimeout: 50 * time.Millisecond})
	disconnectAfterFirst(t, h)
	checkRecord(t, recordOf(convA, 200, true, cannedStartUsage), h.recordFor(t))
	<-upstreamGone
	h.waitServed(t)
}

// TestUpstreamDiesMidStream: the upstream connection breaks after some
// events; the client's stream ends and what passed is recorded.
func TestUpstreamDiesMidStream(t *testing.T) {
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, cannedEvents[0]+cannedEvents[1])
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	}), nil)
	resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), streamBody)
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Errorf("stream ended cleanly after a broken upstream; want an error")
	}
	if !strings.HasPrefix(cannedStream, string(b)) || !strings.HasPrefix(string(b), cannedEvents[0]) {
		t.Errorf("client got %q", b)
	}
	checkRecord(t, recordOf(convA, 200, true, cannedStartUsage), h.recordFor(t))
}

func TestUpstreamUnreachable(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler())
	addr := up.URL
	up.Close()
	h := newHarnessURL(t, addr, nil)
	for name, body := range map[string]string{"json": requestBody, "stream": streamBody} {
		t.Run(name, func(t *testing.T) {
			resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convC)), body)
			got := readAll(t, resp.Body)
			if resp.StatusCode != http.StatusBadGateway || decodeError(t, got) != errAPI {
				t.Errorf("got %d %s, want 502 api_error", resp.StatusCode, got)
			}
			if strings.Contains(got, strings.TrimPrefix(addr, "http://")) {
				t.Errorf("error body reveals the upstream address: %s", got)
			}
			checkRecord(t, recordOf(convC, 0, false, usage{Model: "claude-req-model"}), h.recordFor(t))
		})
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestLogs: one line per call with its facts, and no secret in any line.
func TestLogs(t *testing.T) {
	var buf lockedBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := newHarness(t, fakeAnthropic(), &Options{Logger: logger})

	tok := h.mint(convA)
	parts := strings.Split(tok, ".")
	tampered := strings.Join([]string{parts[0], parts[1], parts[2], flip(parts[3], 5)}, ".")
	expired, _ := h.keys.MintWorkerToken(convA.Tenant, convA.Env, convA.ID, time.Now().Add(-3*time.Minute))
	calls := []http.Header{
		tokenHeader(tok),
		{"Authorization": {"Bearer " + tok}},
		tokenHeader(tampered),
		tokenHeader(expired),
		{"X-Worker-Token": {tok}, ConversationHeader: {convB.ID}},
		{"X-Worker-Token": {tok}, ConversationHeader: {"../" + tok}},
	}
	for i, hdr := range calls {
		body := requestBody
		if i == 0 {
			body = streamBody
		}
		resp := h.post(t, "/v1/messages", hdr, body)
		readAll(t, resp.Body)
		h.waitServed(t)
	}
	h.flush(t) // the call's line is written with its record

	out := buf.String()
	for _, secret := range []string{testAPIKey, tok, parts[2], parts[3], tampered, expired} {
		if strings.Contains(out, secret) {
			t.Errorf("log holds a secret %.16q…", secret)
		}
	}
	lines := logLines(t, out)
	if len(lines) != len(calls) {
		t.Errorf("%d log lines for %d calls:\n%s", len(lines), len(calls), out)
	}
	// A call's line is written with its record, in the background: after
	// the denials that followed it, perhaps.
	var forwarded, denied []map[string]any
	for _, m := range lines {
		switch m["msg"] {
		case "gateway: call":
			forwarded = append(forwarded, m)
		case "gateway: denied":
			if m["status"] == nil {
				t.Errorf("denial logged as %v", m)
			}
			denied = append(denied, m)
		default:
			t.Errorf("unexpected log line %v", m)
		}
	}
	if len(forwarded) != 2 || len(denied) != len(calls)-2 {
		t.Fatalf("%d call lines and %d denials, want 2 and %d:\n%s", len(forwarded), len(denied), len(calls)-2, out)
	}
	first := forwarded[0]
	want := map[string]any{
		"level": "INFO", "msg": "gateway: call", "tenant": "acme", "env": "prod", "conversation": "conv-a",
		"user": "user-1", "path": "/v1/messages", "model": testModel, "status": 200.0, "streamed": true,
		"input_tokens": 25.0, "output_tokens": 15.0, "cache_creation_input_tokens": 100.0, "cache_read_input_tokens": 200.0,
	}
	for k, v := range want {
		if first[k] != v {
			t.Errorf("log field %s = %v, want %v", k, first[k], v)
		}
	}
	if _, ok := first["duration"]; !ok {
		t.Error("log line has no duration")
	}
	if id, _ := first["id"].(string); !strings.HasPrefix(id, "gw_") {
		t.Errorf("log line id = %v, want the record's", first["id"])
	}
}
