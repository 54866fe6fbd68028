package controlplane_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/poll"
	"github.com/talkide/platform/internal/sse"
)

// eventLog is a worker's event log as the worker serves it: a stream
// request gets the events after its replay point, then the live tail as
// events are appended. breakAfter, when set, makes the n-th stream (from
// 1) break after that many events, as a worker restart does.
type eventLog struct {
	size int // bytes of each event's data

	mu         sync.Mutex
	n          int64         // events in the log; guarded by mu
	grew       chan struct{} // closed and replaced at each append; guarded by mu
	breakAfter map[int]int   // guarded by mu
}

func newEventLog(size int) *eventLog {
	return &eventLog{size: size, grew: make(chan struct{}), breakAfter: map[int]int{}}
}

func (l *eventLog) append(k int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n += int64(k)
	close(l.grew)
	l.grew = make(chan struct{})
}

func (l *eventLog) data(seq int64) []byte {
	prefix := fmt.Sprintf(`{"seq":%d,"text":"`, seq)
	return []byte(prefix + strings.Repeat("x", max(0, l.size-len(prefix)-2)) + `"}`)
}

func (l *eventLog) serve(w http.ResponseWriter, r *http.Request, n int) {
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	l.mu.Lock()
	stopAt, breaks := l.breakAfter[n]
	l.mu.Unlock()
	sent := 0
	for seq := after + 1; ; seq++ {
		l.mu.Lock()
		have, grew := l.n, l.grew
		l.mu.Unlock()
		if breaks && sent == stopAt {
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		if seq > have {
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-grew:
			}
			seq--
			continue
		}
		if sse.Write(w, strconv.FormatInt(seq, 10), contract.KindTextDelta, l.data(seq)) != nil {
			return
		}
		sent++
	}
}

// browser is one browser's event stream.
type browser struct {
	resp *http.Response
	rd   *sse.Reader
	stop context.CancelFunc
}

func (h *harness) browser(path string, lastEventID string) *browser {
	h.t.Helper()
	header := http.Header{}
	if lastEventID != "" {
		header.Set("Last-Event-ID", lastEventID)
	}
	resp, stop := h.openStream(path, header)
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		h.t.Fatalf("stream: %d %s", resp.StatusCode, body)
	}
	return &browser{resp: resp, rd: sse.NewReader(resp.Body, 1<<20), stop: stop}
}

// expect reads events until the one numbered to and fails unless they are
// exactly from..to, in order, each with its data.
func (b *browser) expect(t *testing.T, l *eventLog, from, to int64) {
	t.Helper()
	for seq := from; seq <= to; seq++ {
		ev, err := b.rd.Next()
		if err != nil {
			t.Fatalf("waiting for event %d: %v", seq, err)
		}
		if ev.ID != strconv.FormatInt(seq, 10) || ev.Event != contract.KindTextDelta || !bytes.Equal(ev.Data, l.data(seq)) {
			t.Fatalf("event %d: got id %q, kind %q, %d bytes of data", seq, ev.ID, ev.Event, len(ev.Data))
		}
	}
}

func TestStreamHubSharesOneWorkerStream(t *testing.T) {
	l := newEventLog(100)
	h := newHarness(t, harnessOptions{worker: fakeOptions{stream: l.serve}})
	h.insertConversation("demo", user, env)
	l.append(5)
	const n = 12
	var bs []*browser
	for range n {
		bs = append(bs, h.browser("/api/conversations/demo/stream", ""))
	}
	for _, b := range bs {
		b.expect(t, l, 1, 5)
	}
	l.append(20)
	for _, b := range bs {
		b.expect(t, l, 6, 25)
	}
	if got := h.worker.Afters(); len(got) != 1 {
		t.Errorf("worker streams opened for %d browsers: after= %q, want one", n, got)
	}
	if got := h.cp.StreamUpstreams(); got != 1 {
		t.Errorf("StreamUpstreams = %d, want 1", got)
	}
	if got := h.cp.StreamsOpen(); got != n {
		t.Errorf("StreamsOpen = %d, want %d", got, n)
	}
	for _, b := range bs {
		b.stop()
	}
	poll.Until(t, "streams and worker streams closed", func() bool {
		return h.cp.StreamsOpen() == 0 && h.cp.StreamUpstreams() == 0
	})
}

// TestStreamHubResume checks each browser's Last-Event-ID: one within the
// hub's ring joins it, one older catches up on a worker stream of its own
// and then joins, and both get every event after their point once.
func TestStreamHubResume(t *testing.T) {
	l := newEventLog(100)
	h := newHarness(t, harnessOptions{worker: fakeOptions{stream: l.serve},
		streams: controlplane.Options{StreamQueue: 8}})
	h.insertConversation("demo", user, env)
	first := h.browser("/api/conversations/demo/stream", "10")
	l.append(10)
	// One at a time: a burst would overflow the first browser's queue of
	// 8 (TestStreamHubSlowBrowser).
	for seq := int64(11); seq <= 30; seq++ {
		l.append(1)
		first.expect(t, l, seq, seq)
	}
	// The hub started at 10; its ring holds 23..30.

	within := h.browser("/api/conversations/demo/stream", "25")
	older := h.browser("/api/conversations/demo/stream", "3")
	ahead := h.browser("/api/conversations/demo/stream", "40")
	within.expect(t, l, 26, 30)
	older.expect(t, l, 4, 30)
	for seq := int64(31); seq <= 45; seq++ {
		l.append(1)
		first.expect(t, l, seq, seq)
		within.expect(t, l, seq, seq)
		older.expect(t, l, seq, seq)
		if seq > 40 {
			ahead.expect(t, l, seq, seq)
		}
	}
	// The catch-up's worker stream closes once it has joined.
	poll.Until(t, "one worker stream once the catch-up joined", func() bool { return h.cp.StreamUpstreams() == 1 })
	if diff := strings.Join(h.worker.Afters(), ","); diff != "10,3" {
		t.Errorf("worker streams' after= %s, want 10,3", diff)
	}
}

// TestStreamHubSlowBrowser checks that a browser that reads nothing does
// not hold up the others, and that it still gets every event once, in
// order, when it reads again: it fell out of the hub and caught up on its
// own worker stream.
func TestStreamHubSlowBrowser(t *testing.T) {
	l := newEventLog(16 << 10)
	h := newHarness(t, harnessOptions{worker: fakeOptions{stream: l.serve},
		streams: controlplane.Options{StreamQueue: 4}})
	h.insertConversation("demo", user, env)
	slow := h.browser("/api/conversations/demo/stream", "")
	fast := h.browser("/api/conversations/demo/stream", "")
	// 1,000 events of 16 KiB are 16 MiB: more than the sockets between
	// the slow browser and the control-plane buffer, so its queue fills.
	const total = 1000
	l.append(total)
	fast.expect(t, l, 1, total)
	slow.expect(t, l, 1, total)
	l.append(10)
	fast.expect(t, l, total+1, total+10)
	slow.expect(t, l, total+1, total+10)
	if got := len(h.worker.Afters()); got < 2 {
		t.Errorf("worker streams = %d: the slow browser never caught up on its own", got)
	}
}

// TestStreamHubWorkerRestart breaks the hub's worker stream mid-stream,
// twice: every browser gets every event once, in order.
func TestStreamHubWorkerRestart(t *testing.T) {
	l := newEventLog(100)
	l.breakAfter[1] = 7
	l.breakAfter[2] = 3
	h := newHarness(t, harnessOptions{worker: fakeOptions{stream: l.serve}})
	h.insertConversation("demo", user, env)
	var bs []*browser
	for range 5 {
		bs = append(bs, h.browser("/api/conversations/demo/stream", ""))
	}
	l.append(40)
	for _, b := range bs {
		b.expect(t, l, 1, 40)
	}
	if got := strings.Join(h.worker.Afters(), ","); got != "0,7,10" {
		t.Errorf("worker streams' after= %s, want 0,7,10", got)
	}
}

func TestStreamHubEndsOnWorkerNotFound(t *testing.T) {
	l := newEventLog(100)
	l.append(2)
	gate := make(chan struct{}) // the hub's first worker stream breaks when it closes
	h := newHarness(t, harnessOptions{worker: fakeOptions{stream: func(w http.ResponseWriter, r *http.Request, n int) {
		if n > 1 {
			httpapi.WriteError(w, http.StatusNotFound, contract.CodeNotFound, "no session")
			return
		}
		serveEvents(w, 1, 0)
		for seq := int64(1); seq <= 2; seq++ {
			sse.Write(w, strconv.FormatInt(seq, 10), contract.KindTextDelta, l.data(seq))
		}
		w.(http.Flusher).Flush()
		<-gate
		panic(http.ErrAbortHandler)
	}}})
	h.insertConversation("demo", user, env)
	var bs []*browser
	for range 3 {
		b := h.browser("/api/conversations/demo/stream", "")
		b.expect(t, l, 1, 2)
		bs = append(bs, b)
	}
	close(gate)
	for _, b := range bs {
		if _, err := b.rd.Next(); err != io.EOF {
			t.Errorf("after the worker's 404: %v, want the end of the stream", err)
		}
	}
	poll.Until(t, "slots given back", func() bool { return h.cp.StreamsOpen() == 0 })
}

type refusals struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *refusals) StreamRefused(limit string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[limit]++
}

func TestStreamCaps(t *testing.T) {
	tests := map[string]struct {
		opts       controlplane.Options
		open       []string // conversations whose streams are accepted
		over       string   // the conversation of the stream refused
		status     int
		retryAfter string
		limit      string
		msg        string
	}{
		"per user": {
			opts: controlplane.Options{MaxStreamsPerUser: 3},
			open: []string{"a", "a", "b"}, over: "c",
			status: http.StatusTooManyRequests, retryAfter: "5", limit: "user", msg: "per-user cap is 3",
		},
		"per conversation": {
			opts: controlplane.Options{MaxStreamsPerConversation: 2},
			open: []string{"a", "a", "b"}, over: "a",
			status: http.StatusTooManyRequests, retryAfter: "5", limit: "conversation", msg: "per-conversation cap is 2",
		},
		"total": {
			opts: controlplane.Options{MaxStreams: 4},
			open: []string{"a", "b", "c", "a"}, over: "b",
			status: http.StatusServiceUnavailable, retryAfter: "1", limit: "total", msg: "total cap is 4",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			l := newEventLog(10)
			rf := &refusals{n: map[string]int{}}
			tt.opts.StreamMetrics = rf
			h := newHarness(t, harnessOptions{worker: fakeOptions{stream: l.serve}, streams: tt.opts})
			for _, c := range []string{"a", "b", "c"} {
				h.insertConversation(c, user, env)
			}
			var bs []*browser
			for _, c := range tt.open {
				bs = append(bs, h.browser("/api/conversations/"+c+"/stream", ""))
			}
			resp, body := h.do(http.MethodGet, "/api/conversations/"+tt.over+"/stream", "", nil)
			wantError(t, resp, body, tt.status, contract.CodeTooManyStreams)
			if got := resp.Header.Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tt.retryAfter)
			}
			if !strings.Contains(string(body), tt.msg) {
				t.Errorf("the refusal %s does not name the cap (%q)", body, tt.msg)
			}
			if !resp.Close {
				t.Error("the refused stream's connection was kept open")
			}
			if rf.n[tt.limit] != 1 || len(rf.n) != 1 {
				t.Errorf("refusals counted: %v, want one of %q", rf.n, tt.limit)
			}
			// What the others are doing goes on.
			l.append(3)
			for _, b := range bs {
				b.expect(t, l, 1, 3)
			}
			// A closed stream's slot is free again.
			bs[0].stop()
			poll.Until(t, "the slot given back", func() bool { return h.cp.StreamsOpen() == len(tt.open)-1 })
			h.browser("/api/conversations/"+tt.over+"/stream", "").expect(t, l, 1, 3)
		})
	}
}

// TestStreamSlotsDoNotLeak opens and closes streams many times, some
// cleanly, some by cutting the TCP connection, some before the first
// event and some after: afterwards no slot, hub or worker stream is left.
func TestStreamSlotsDoNotLeak(t *testing.T) {
	l := newEventLog(10)
	h := newHarness(t, harnessOptions{worker: fakeOptions{stream: l.serve},
		streams: controlplane.Options{MaxStreamsPerUser: 8, MaxStreamsPerConversation: 8, MaxStreams: 8}})
	h.insertConversation("demo", user, env)
	h.insertConversation("other", user, env)
	l.append(1)
	addr := strings.TrimPrefix(h.url, "http://")
	const cycles = 600
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range cycles {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			conv := []string{"demo", "other"}[i%2]
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			fmt.Fprintf(c, "GET /api/conversations/%s/stream HTTP/1.1\r\nHost: %s\r\n\r\n", conv, addr)
			if i%3 == 0 {
				return // cut before reading anything
			}
			buf := make([]byte, 4096)
			var got []byte
			for !bytes.Contains(got, []byte("id: 1\n")) {
				n, err := c.Read(buf)
				if err != nil {
					// A refusal (every slot taken by the other cycles
					// still closing) is fine; a crash would show below.
					if !bytes.Contains(got, []byte(" 503 ")) && !bytes.Contains(got, []byte(" 429 ")) {
						t.Errorf("cycle %d: %v after %q", i, err, got)
					}
					return
				}
				got = append(got, buf[:n]...)
			}
			if i%3 == 1 {
				c.(*net.TCPConn).SetLinger(0) // an abrupt close: RST
			}
		})
	}
	wg.Wait()
	poll.Until(t, "every slot, hub and worker stream released", func() bool {
		return h.cp.StreamsOpen() == 0 && h.cp.StreamUpstreams() == 0
	})
	// And the caps still admit a full set.
	for range 8 {
		h.browser("/api/conversations/demo/stream", "").expect(t, l, 1, 1)
	}
}
