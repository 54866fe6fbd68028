package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/store"
)

// holdRecords makes h's store hold every write until release is closed (or
// the write's context ends); each write's batch is sent on entered first.
func holdRecords(h *harness) (entered chan []store.UsageRecord, release chan struct{}) {
	entered = make(chan []store.UsageRecord, 64)
	release = make(chan struct{})
	h.store.setOnRecord(func(ctx context.Context, us []store.UsageRecord) error {
		entered <- us
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	return entered, release
}

// oneHeldCall makes a harness that logs to buf, makes one call and waits
// for its record's write to reach the store, where it is held until release
// is closed.
func oneHeldCall(t *testing.T, buf *lockedBuffer) (h *harness, release chan struct{}) {
	t.Helper()
	h = newHarness(t, fakeAnthropic(), &Options{Logger: jsonLogger(buf)})
	entered, release := holdRecords(h)
	h.call(t)
	waitEntered(t, entered)
	return h, release
}

// waitEntered waits for the next write to reach the store.
func waitEntered(t *testing.T, entered chan []store.UsageRecord) []store.UsageRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	select {
	case us := <-entered:
		return us
	case <-ctx.Done():
		t.Fatal("no write reached the store")
		panic("unreachable")
	}
}

// waitRecorder waits until cond, called with r.mu held, holds.
func waitRecorder(t *testing.T, r *recorder, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	for !cond() {
		if err := r.wait(ctx); err != nil {
			t.Fatal("the recorder never got there")
		}
	}
}

// call makes one complete JSON call for convA and waits until the gateway
// has finished it.
func (h *harness) call(t *testing.T) {
	t.Helper()
	resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), requestBody)
	if got := readAll(t, resp.Body); resp.StatusCode != http.StatusOK || got != cannedJSON {
		t.Fatalf("got %d %q, want the upstream's answer", resp.StatusCode, got)
	}
	h.waitServed(t)
}

// logLines parses the JSON log lines in out.
func logLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for line := range strings.Lines(out) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		lines = append(lines, m)
	}
	return lines
}

// withMsg returns the lines whose msg is msg.
func withMsg(lines []map[string]any, msg string) []map[string]any {
	var out []map[string]any
	for _, m := range lines {
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func jsonLogger(buf *lockedBuffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestRecordOffCallPath: the client's response, to its last chunk, does not
// wait for the usage record's store write.
func TestRecordOffCallPath(t *testing.T) {
	h := newHarness(t, fakeAnthropic(), nil)
	entered, release := holdRecords(h)

	resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), streamBody)
	if got := readAll(t, resp.Body); got != cannedStream {
		t.Fatalf("stream = %q, want the upstream's", got)
	}
	h.waitServed(t)
	us := waitEntered(t, entered)
	if n := len(h.store.records()); n != 0 {
		t.Fatalf("%d records stored while the store write is held", n)
	}
	close(release)
	h.flush(t)
	got := h.store.records()
	if len(got) != 1 || len(us) != 1 || got[0].ID != us[0].ID {
		t.Fatalf("records %+v, want the one held", got)
	}
	checkRecord(t, recordOf(convA, 200, true, cannedStreamUsage), got[0])
}

// TestRecordBatches: records that wait while a write is in progress go in
// the next writes, at most batch at a time, in the order the calls ended.
func TestRecordBatches(t *testing.T) {
	h := newHarnessSetup(t, newUpstream(t), nil, func(g *Gateway) { g.rec.batch = 4 })
	entered, release := holdRecords(h)

	h.call(t)
	waitEntered(t, entered)
	for range 9 {
		h.call(t) // each ends while the first record's write is held
	}
	close(release)
	h.flush(t)
	if diff := cmp.Diff([]int{1, 4, 4, 1}, h.store.batchSizes()); diff != "" {
		t.Errorf("batch sizes (-want +got):\n%s", diff)
	}
	recs := h.store.records()
	seen := map[string]bool{}
	for i, r := range recs {
		if seen[r.ID] {
			t.Errorf("record %s stored twice", r.ID)
		}
		seen[r.ID] = true
		if i > 0 && r.StartedAt.Before(recs[i-1].StartedAt) {
			t.Errorf("record %d started before record %d: not in the order the calls ended", i, i-1)
		}
		checkRecord(t, recordOf(convA, 200, false, cannedJSONUsage), r)
	}
	if len(recs) != 10 {
		t.Errorf("%d records, want 10", len(recs))
	}
}

// TestFlushWaits: Flush returns when the records of the calls that ended
// before it are written and logged, not before.
func TestFlushWaits(t *testing.T) {
	var buf lockedBuffer
	h, release := oneHeldCall(t, &buf)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := h.gw.Flush(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Flush while the write is held = %v, want context.Canceled", err)
	}
	close(release)
	h.flush(t)
	if n := len(h.store.records()); n != 1 {
		t.Errorf("%d records after Flush, want 1", n)
	}
	if n := len(withMsg(logLines(t, buf.String()), "gateway: call")); n != 1 {
		t.Errorf("%d call lines after Flush, want 1:\n%s", n, buf.String())
	}
	// Nothing waits: Flush returns at once.
	if err := h.gw.Flush(ctx); err != nil {
		t.Errorf("Flush with nothing to write = %v", err)
	}
}

// TestRecordRetried: a failing write is retried, and the record is stored
// and logged once when the store recovers.
func TestRecordRetried(t *testing.T) {
	var buf lockedBuffer
	h := newHarness(t, fakeAnthropic(), &Options{Logger: jsonLogger(&buf)})
	var attempts atomic.Int64
	h.store.setOnRecord(func(context.Context, []store.UsageRecord) error {
		if attempts.Add(1) <= 2 {
			return errors.New("database is locked")
		}
		return nil
	})

	h.call(t)
	h.flush(t)
	recs := h.store.records()
	if len(recs) != 1 || attempts.Load() != 3 {
		t.Fatalf("%d records after %d attempts, want 1 after 3", len(recs), attempts.Load())
	}
	lines := logLines(t, buf.String())
	if n := len(withMsg(lines, "gateway: record usage, retrying")); n != 2 {
		t.Errorf("%d retry lines, want 2", n)
	}
	calls := withMsg(lines, "gateway: call")
	if len(calls) != 1 || calls[0]["id"] != recs[0].ID {
		t.Errorf("call lines %v, want one for %s", calls, recs[0].ID)
	}
	if n := len(withMsg(lines, "gateway: usage record lost")); n != 0 {
		t.Errorf("%d records logged as lost", n)
	}
}

// TestRecordLost: a record the store refuses until the retries end is
// logged as lost at Error level, with the call's facts and no secret.
func TestRecordLost(t *testing.T) {
	var buf lockedBuffer
	h := newHarnessSetup(t, newUpstream(t), &Options{Logger: jsonLogger(&buf)}, func(g *Gateway) { g.rec.retryFor = 0 })
	h.store.setOnRecord(func(context.Context, []store.UsageRecord) error {
		return errors.New("database is locked")
	})

	tok := h.mint(convA)
	resp := h.post(t, "/v1/messages", tokenHeader(tok), requestBody)
	readAll(t, resp.Body)
	h.waitServed(t)
	h.flush(t)
	if n := len(h.store.records()); n != 0 {
		t.Fatalf("%d records stored", n)
	}
	out := buf.String()
	parts := strings.Split(tok, ".")
	for _, secret := range []string{tok, parts[2], parts[3], testAPIKey} {
		if strings.Contains(out, secret) {
			t.Errorf("log holds a secret %.16q…", secret)
		}
	}
	lost := withMsg(logLines(t, out), "gateway: usage record lost")
	if len(lost) != 1 {
		t.Fatalf("%d lost lines, want 1:\n%s", len(lost), out)
	}
	want := map[string]any{
		"level": "ERROR", "tenant": "acme", "env": "prod", "conversation": "conv-a", "user": "user-1",
		"path": "/v1/messages", "model": testModel, "status": 200.0, "input_tokens": 12.0, "output_tokens": 6.0,
		"record_err": "database is locked",
	}
	for k, v := range want {
		if lost[0][k] != v {
			t.Errorf("lost line field %s = %v, want %v", k, lost[0][k], v)
		}
	}
	if id, _ := lost[0]["id"].(string); !strings.HasPrefix(id, "gw_") {
		t.Errorf("lost line id = %v, want the record's", lost[0]["id"])
	}
}

// TestRecordBackpressure: a call that finds the queue full waits for room
// instead of dropping its record.
func TestRecordBackpressure(t *testing.T) {
	h := newHarnessSetup(t, newUpstream(t), nil, func(g *Gateway) { g.rec.batch, g.rec.limit = 1, 1 })
	entered, release := holdRecords(h)

	h.call(t)
	waitEntered(t, entered) // the writer holds the first record
	h.call(t)               // the second fills the queue
	third := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/messages", strings.NewReader(requestBody))
		req.Header.Set(TokenHeader, h.mint(convA))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		third <- err
	}()
	waitRecorder(t, h.gw.rec, func() bool { return h.gw.rec.waiting == 1 })
	select {
	case <-h.served:
		t.Fatal("the third call ended while its record had no room")
	default:
	}
	close(release)
	h.waitServed(t)
	if err := <-third; err != nil {
		t.Fatal(err)
	}
	h.flush(t)
	if n := len(h.store.records()); n != 3 {
		t.Errorf("%d records, want 3", n)
	}
	if diff := cmp.Diff([]int{1, 1, 1}, h.store.batchSizes()); diff != "" {
		t.Errorf("batch sizes (-want +got):\n%s", diff)
	}
}

// TestRecordAfterClose: Close writes what is queued and stops the writer;
// a call after Close writes its record before it ends.
func TestRecordAfterClose(t *testing.T) {
	var buf lockedBuffer
	h := newHarness(t, fakeAnthropic(), &Options{Logger: jsonLogger(&buf)})
	h.call(t)
	if err := h.gw.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := len(h.store.records()); n != 1 {
		t.Fatalf("%d records after Close, want 1", n)
	}
	h.gw.rec.mu.Lock()
	running := h.gw.rec.running
	h.gw.rec.mu.Unlock()
	if running {
		t.Error("the writer runs after Close")
	}

	h.call(t)
	if n := len(h.store.records()); n != 2 {
		t.Fatalf("%d records once a call after Close ended, want 2", n)
	}
	if n := len(withMsg(logLines(t, buf.String()), "gateway: call")); n != 2 {
		t.Errorf("%d call lines, want 2", n)
	}
	if err := h.gw.Flush(t.Context()); err != nil {
		t.Errorf("Flush after Close = %v", err)
	}
}

// TestCloseGivesUp: when Close's context ends before the queue is written,
// the writer stops and the records left are logged as lost.
func TestCloseGivesUp(t *testing.T) {
	var buf lockedBuffer
	h, _ := oneHeldCall(t, &buf)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := h.gw.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close = %v, want context.Canceled", err)
	}
	if n := len(h.store.records()); n != 0 {
		t.Errorf("%d records stored", n)
	}
	if n := len(withMsg(logLines(t, buf.String()), "gateway: usage record lost")); n != 1 {
		t.Errorf("%d lost lines, want 1:\n%s", n, buf.String())
	}
}

// newUpstream serves fakeAnthropic until the test ends and returns its URL.
func newUpstream(t *testing.T) string {
	t.Helper()
	up := httptest.NewServer(fakeAnthropic())
	t.Cleanup(up.Close)
	return up.URL
}

// TestRecordBadRecordAlone: a batch the store refuses is written record
// by record, so that the one record it refuses is lost alone.
func TestRecordBadRecordAlone(t *testing.T) {
	var buf lockedBuffer
	h := newHarnessSetup(t, newUpstream(t), &Options{Logger: jsonLogger(&buf)}, func(g *Gateway) { g.rec.retryFor = 0 })
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var (
		first atomic.Bool
		bad   atomic.Value // the id the store refuses: the second of the first batch
	)
	h.store.setOnRecord(func(ctx context.Context, us []store.UsageRecord) error {
		if first.CompareAndSwap(false, true) {
			entered <- struct{}{}
			<-release
			return nil
		}
		if len(us) > 1 {
			bad.CompareAndSwap(nil, us[1].ID)
		}
		for _, u := range us {
			if u.ID == bad.Load() {
				return errors.New("invalid byte sequence for encoding UTF8")
			}
		}
		return nil
	})
	h.call(t)
	<-entered
	for range 4 {
		h.call(t) // queued behind the held write: one batch
	}
	close(release)
	h.flush(t)
	if n := len(h.store.records()); n != 4 {
		t.Errorf("%d records stored, want the 4 good ones", n)
	}
	lines := logLines(t, buf.String())
	lost := withMsg(lines, "gateway: usage record lost")
	if len(lost) != 1 || lost[0]["id"] != bad.Load() {
		t.Errorf("lost lines %v, want one, for %v", lost, bad.Load())
	}
	if n := len(withMsg(lines, "gateway: call")); n != 4 {
		t.Errorf("%d call lines, want 4", n)
	}
}

// TestRecorderLingers: calls that come one at a time share a write: the
// writer waits for more records before it writes a batch that is not
// full, and a Flush ends the wait at once.
func TestRecorderLingers(t *testing.T) {
	h := newHarnessSetup(t, newUpstream(t), nil, func(g *Gateway) { g.rec.linger = time.Hour })
	for range 3 {
		resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), `{"model":"claude-req-model","max_tokens":16}`)
		readAll(t, resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		h.waitServed(t) // its record is handed to the recorder
	}
	if got := h.store.batchSizes(); len(got) != 0 {
		t.Fatalf("written before the linger ended: batches %v", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := h.gw.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.store.batchSizes(); !slices.Equal(got, []int{3}) {
		t.Fatalf("batches %v, want one of 3", got)
	}
}
