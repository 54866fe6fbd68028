package controlplane_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/sse"
)

// kinds are the event kinds of sequence numbers 1..5 in these tests.
var kinds = []string{"", contract.KindSessionCreated, contract.KindNotice, contract.KindUserMessage, contract.KindTurnStarted, contract.KindTextDelta}

func eventData(seq int64) []byte {
	b, err := json.Marshal(contract.Event{Seq: seq, Kind: kinds[seq], ConversationID: "demo", Time: start, Text: "line one\nline two"})
	if err != nil {
		panic(err)
	}
	return b
}

// serveEvents starts an SSE answer and writes the events with sequence
// numbers from..to (none when from > to), flushing each.
func serveEvents(w http.ResponseWriter, from, to int64) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	for seq := from; seq <= to; seq++ {
		if err := sse.Write(w, strconv.FormatInt(seq, 10), kinds[seq], eventData(seq)); err != nil {
			return
		}
		sse.WriteComment(w, "heartbeat") // the worker's own; the relay drops it
		w.(http.Flusher).Flush()
	}
}

// streamLog serves the events of evs after the request's ?after=, as a
// worker's stream does, then holds the stream open until the client
// leaves.
func streamLog(w http.ResponseWriter, r *http.Request, evs []contract.Event) {
	w.Header().Set("Content-Type", "text/event-stream")
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	for _, ev := range evs {
		if ev.Seq > after {
			b, _ := json.Marshal(ev)
			sse.Write(w, strconv.FormatInt(ev.Seq, 10), ev.Kind, b)
		}
	}
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

// hold keeps a started worker stream open until its request ends.
func hold(w http.ResponseWriter, r *http.Request) {
	<-r.Context().Done()
}

// openStream opens the browser stream of a conversation; the stream ends
// with the test or when cancel is called.
func (h *harness) openStream(path string, header http.Header) (*http.Response, context.CancelFunc) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(h.t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url+path, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		cancel()
		resp.Body.Close()
	})
	return resp, cancel
}

// reconnecting is a worker's stream that serves each connection in turn:
// connection n is served by conns[n-1], and every later one serves the
// events from to 5 and holds.
func reconnecting(from int64, conns ...func(w http.ResponseWriter)) func(w http.ResponseWriter, r *http.Request, n int) {
	return func(w http.ResponseWriter, r *http.Request, n int) {
		if n <= len(conns) {
			conns[n-1](w)
			return
		}
		serveEvents(w, from, 5)
		hold(w, r)
	}
}

func TestStreamRelayReconnects(t *testing.T) {
	firstThree := func(w http.ResponseWriter) { serveEvents(w, 1, 3) }
	tests := map[string]struct {
		stream     func(w http.ResponseWriter, r *http.Request, n int)
		wantAfters []string
	}{
		// The worker's stream ends cleanly after 3, then resumes with an
		// overlap.
		"stream ends": {reconnecting(3, firstThree), []string{"0", "3"}},
		// The worker's connection breaks mid-stream.
		"connection breaks": {reconnecting(3, func(w http.ResponseWriter) {
			firstThree(w)
			panic(http.ErrAbortHandler)
		}), []string{"0", "3"}},
		// The worker is briefly away between two streams.
		"worker restarting": {reconnecting(2, firstThree, func(w http.ResponseWriter) {
			httpapi.WriteError(w, http.StatusServiceUnavailable, contract.CodeShuttingDown, "restarting")
		}), []string{"0", "3", "3"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{worker: fakeOptions{stream: tt.stream}})
			h.insertConversation("demo", user, env)
			resp, _ := h.openStream("/api/conversations/demo/stream", nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d", resp.StatusCode)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Errorf("Content-Type = %q", ct)
			}
			rd := sse.NewReader(resp.Body, 1<<20)
			var got []sse.Event
			for len(got) < 5 {
				ev, err := rd.Next()
				if err != nil {
					t.Fatalf("after %d events: %v", len(got), err)
				}
				got = append(got, ev)
			}
			var want []sse.Event
			for seq := int64(1); seq <= 5; seq++ {
				want = append(want, sse.Event{ID: strconv.FormatInt(seq, 10), Event: kinds[seq], Data: eventData(seq)})
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("browser events (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantAfters, h.worker.Afters()); diff != "" {
				t.Errorf("worker stream requests' after= (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStreamReplayPoint(t *testing.T) {
	tests := map[string]struct {
		query     string
		header    string
		wantAfter string
		wantCode  string // a 400 before any worker call
	}{
		"from the start":       {wantAfter: "0"},
		"Last-Event-ID":        {header: "7", wantAfter: "7"},
		"after":                {query: "?after=4", wantAfter: "4"},
		"header wins":          {header: "7", query: "?after=4", wantAfter: "7"},
		"bad Last-Event-ID":    {header: "seven", wantCode: contract.CodeBadRequest},
		"negative after":       {query: "?after=-1", wantCode: contract.CodeBadRequest},
		"non-numeric after":    {query: "?after=x", wantCode: contract.CodeBadRequest},
		"bad header, ok after": {header: "-3", query: "?after=4", wantCode: contract.CodeBadRequest},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			// The fake worker has no session: its 404 ends the stream.
			h := demoHarness(t)
			header := http.Header{}
			if tt.header != "" {
				header.Set("Last-Event-ID", tt.header)
			}
			resp, body := h.do(http.MethodGet, "/api/conversations/demo/stream"+tt.query, "", header)
			if tt.wantCode != "" {
				wantError(t, resp, body, http.StatusBadRequest, tt.wantCode)
				h.wantNoWorkerRequests(t, "")
				return
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d: %s", resp.StatusCode, body)
			}
			if diff := cmp.Diff([]string{tt.wantAfter}, h.worker.Afters()); diff != "" {
				t.Errorf("worker after= (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStreamEndsOnWorkerNotFound checks that a worker that lost the session
// ends the browser's stream instead of being retried forever, also after
// events were relayed and with heartbeats running.
func TestStreamEndsOnWorkerNotFound(t *testing.T) {
	h := newHarness(t, harnessOptions{heartbeat: time.Millisecond, worker: fakeOptions{
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 1 {
				serveEvents(w, 1, 2)
				return
			}
			httpapi.WriteError(w, http.StatusNotFound, contract.CodeNotFound, "no session demo")
		},
	}})
	h.insertConversation("demo", user, env)
	resp, _ := h.openStream("/api/conversations/demo/stream", nil)
	rd := sse.NewReader(resp.Body, 1<<20)
	var ids []string
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ev.ID)
	}
	if diff := cmp.Diff([]string{"1", "2"}, ids); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"0", "2"}, h.worker.Afters()); diff != "" {
		t.Errorf("worker after= (-want +got):\n%s", diff)
	}
}

func TestStreamHeartbeat(t *testing.T) {
	h := newHarness(t, harnessOptions{heartbeat: 5 * time.Millisecond, worker: fakeOptions{
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			serveEvents(w, 1, 0) // headers only
			hold(w, r)
		},
	}})
	h.insertConversation("demo", user, env)
	resp, _ := h.openStream("/api/conversations/demo/stream", nil)
	br := bufio.NewReader(resp.Body)
	for beats := 0; beats < 2; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d heartbeats: %v", beats, err)
		}
		switch line {
		case ": heartbeat\n":
			beats++
		case "\n":
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
}

// TestStreamStopsWhenBrowserLeaves checks that the relay's request to the
// worker ends when the browser disconnects.
func TestStreamStopsWhenBrowserLeaves(t *testing.T) {
	started, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := newHarness(t, harnessOptions{worker: fakeOptions{
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			serveEvents(w, 1, 1)
			once.Do(func() { close(started) })
			<-r.Context().Done()
			close(done)
		},
	}})
	h.insertConversation("demo", user, env)
	resp, cancel := h.openStream("/api/conversations/demo/stream", nil)
	if ev, err := sse.NewReader(resp.Body, 1<<20).Next(); err != nil || ev.ID != "1" {
		t.Fatalf("first event = %+v, %v", ev, err)
	}
	<-started
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker stream is still open 10 s after the browser left")
	}
	if n := len(h.worker.Afters()); n != 1 {
		t.Errorf("the relay opened %d worker streams, want 1", n)
	}
}
