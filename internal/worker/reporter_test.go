package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/trust"
)

// controlPlane is a fake reports endpoint: it verifies signatures, stores
// each idempotency key once, and answers the first failFirst batches with
// 503 after storing them, as a control-plane whose answer was lost would.
type controlPlane struct {
	t         *testing.T
	srv       *httptest.Server
	verifier  *trust.Verifier
	failFirst int
	// hold, when not nil, blocks the first batch until it is closed.
	hold chan struct{}
	// holding is closed when the first batch has arrived and is held.
	holding chan struct{}

	mu       sync.Mutex
	batches  int               // guarded by mu
	received map[string]int    // guarded by mu: deliveries per key
	stored   []contract.Report // guarded by mu: first deliveries, in order
}

func newControlPlane(t *testing.T, failFirst int, hold bool) *controlPlane {
	t.Helper()
	lookup := func(tenant, env, kid string) ([]byte, bool) {
		return testKey, tenant == testTenant && env == testEnv && kid == testKeyID
	}
	cp := &controlPlane{
		t:         t,
		verifier:  trust.NewVerifier(trust.ToControlPlane, lookup, nil),
		failFirst: failFirst,
		received:  map[string]int{},
		holding:   make(chan struct{}),
	}
	if hold {
		cp.hold = make(chan struct{})
	}
	cp.srv = httptest.NewServer(http.HandlerFunc(cp.serve))
	t.Cleanup(cp.srv.Close)
	return cp
}

func (cp *controlPlane) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, contract.MaxReportBatch+1))
	if err != nil || r.Method != http.MethodPost || r.URL.Path != contract.ReportsPath {
		cp.t.Errorf("bad report request %s %s: %v", r.Method, r.URL.Path, err)
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if _, err := cp.verifier.Verify(r, body); err != nil {
		cp.t.Errorf("report signature: %v", err)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	var batch contract.ReportBatch
	if err := json.Unmarshal(body, &batch); err != nil {
		cp.t.Errorf("report batch: %v", err)
		http.Error(w, "bad batch", http.StatusBadRequest)
		return
	}
	cp.mu.Lock()
	cp.batches++
	n := cp.batches
	var ack contract.ReportAck
	for _, rep := range batch.Reports {
		cp.received[rep.IdempotencyKey]++
		if cp.received[rep.IdempotencyKey] == 1 {
			cp.stored = append(cp.stored, rep)
			ack.Accepted++
		} else {
			ack.Duplicates++
		}
	}
	cp.mu.Unlock()
	if n == 1 && cp.hold != nil {
		close(cp.holding)
		<-cp.hold
	}
	if n <= cp.failFirst {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(ack)
}

func (cp *controlPlane) keys() []string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var out []string
	for _, r := range cp.stored {
		out = append(out, r.IdempotencyKey)
	}
	return out
}

func (cp *controlPlane) deliveries(key string) int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.received[key]
}

// startReporter runs a reporter against cp until the test ends.
func startReporter(t *testing.T, cp *controlPlane, opts *ReporterOptions, queued ...contract.Report) *Reporter {
	t.Helper()
	rp := NewReporter(cp.srv.URL+"/", &trust.Signer{
		Direction: trust.ToControlPlane, Tenant: testTenant, Env: testEnv, KeyID: testKeyID, Key: testKey,
	}, opts)
	for _, r := range queued {
		rp.Enqueue(r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rp.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return rp
}

func report(i int) contract.Report {
	return contract.Report{
		IdempotencyKey: fmt.Sprintf("conv-1/r-%03d", i),
		Kind:           contract.ReportActivity,
		ConversationID: "conv-1",
		Time:           time.Unix(1_900_000_000, 0).UTC(),
		Activity:       fmt.Sprintf("step %d", i),
	}
}

func reports(from, to int) []contract.Report {
	var out []contract.Report
	for i := from; i < to; i++ {
		out = append(out, report(i))
	}
	return out
}

func keysOf(rs []contract.Report) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.IdempotencyKey)
	}
	return out
}

func TestReporterRetriesUntilAcknowledged(t *testing.T) {
	cp := newControlPlane(t, 2, false)
	first := reports(0, 5)
	rp := startReporter(t, cp, nil, first...)
	eventually(t, "the first reports are acknowledged", func() bool { return rp.Pending() == 0 })
	// Queued later, after the control-plane has recovered.
	later := reports(5, 8)
	for _, r := range later {
		rp.Enqueue(r)
	}
	eventually(t, "all reports are acknowledged", func() bool { return rp.Pending() == 0 && len(cp.keys()) == 8 })

	if diff := cmp.Diff(keysOf(append(first, later...)), cp.keys()); diff != "" {
		t.Errorf("stored reports (-want +got):\n%s", diff)
	}
	// The unacknowledged batch was resent; the keys kept it from counting
	// twice.
	for _, r := range first {
		if n := cp.deliveries(r.IdempotencyKey); n != 3 {
			t.Errorf("%s delivered %d times, want 3 (two answered 503)", r.IdempotencyKey, n)
		}
	}
	for _, r := range later {
		if n := cp.deliveries(r.IdempotencyKey); n != 1 {
			t.Errorf("%s delivered %d times, want 1", r.IdempotencyKey, n)
		}
	}
	cp.mu.Lock()
	got := cp.stored[0]
	cp.mu.Unlock()
	if diff := cmp.Diff(first[0], got); diff != "" {
		t.Errorf("report content (-sent +stored):\n%s", diff)
	}
}

func TestReporterLargeQueueInBatches(t *testing.T) {
	cp := newControlPlane(t, 0, false)
	all := reports(0, 2*maxBatch+17)
	rp := startReporter(t, cp, nil, all...)
	eventually(t, "all reports are acknowledged", func() bool { return rp.Pending() == 0 && len(cp.keys()) == len(all) })
	if diff := cmp.Diff(keysOf(all), cp.keys()); diff != "" {
		t.Errorf("stored reports (-want +got):\n%s", diff)
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.batches != 3 {
		t.Errorf("%d batches, want 3", cp.batches)
	}
}

func TestNilReporterDropsReports(t *testing.T) {
	var rp *Reporter
	rp.Enqueue(report(1)) // must not panic
}

func TestReporterMaxQueueDropsOldest(t *testing.T) {
	cp := newControlPlane(t, 0, false)
	// Queued before Run: the oldest beyond MaxQueue are dropped.
	rp := startReporter(t, cp, &ReporterOptions{MaxQueue: 3}, reports(0, 5)...)
	eventually(t, "the kept reports are acknowledged", func() bool { return rp.Pending() == 0 && len(cp.keys()) == 3 })
	if diff := cmp.Diff(keysOf(reports(2, 5)), cp.keys()); diff != "" {
		t.Errorf("stored reports (-want +got):\n%s", diff)
	}
}

// TestReporterDropWhileBatchInFlight: when the queue overflows while a batch
// is being sent, the acknowledgement must remove only the reports of that
// batch still queued, not newer ones that moved to the head.
func TestReporterDropWhileBatchInFlight(t *testing.T) {
	cp := newControlPlane(t, 0, true)
	rp := NewReporter(cp.srv.URL, &trust.Signer{
		Direction: trust.ToControlPlane, Tenant: testTenant, Env: testEnv, KeyID: testKeyID, Key: testKey,
	}, &ReporterOptions{MaxQueue: 3})
	for _, r := range reports(0, 3) {
		rp.Enqueue(r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rp.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	select {
	case <-cp.holding:
	case <-time.After(waitFor):
		t.Fatal("the first batch did not arrive")
	}
	// r-000..r-002 are in flight; r-003 and r-004 push the two oldest out
	// of the full queue.
	rp.Enqueue(report(3))
	rp.Enqueue(report(4))
	close(cp.hold)
	eventually(t, "everything is acknowledged", func() bool { return rp.Pending() == 0 })
	eventually(t, "the newer reports arrive", func() bool { return len(cp.keys()) >= 5 })
	if diff := cmp.Diff(keysOf(reports(0, 5)), cp.keys()); diff != "" {
		t.Errorf("stored reports (-want +got):\n%s", diff)
	}
}
