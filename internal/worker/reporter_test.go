package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/poll"
	"github.com/talkide/platform/internal/sessionstore"
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

// outbox opens a session store outbox for the reports of conversation c1.
func outbox(t *testing.T) *sessionstore.Session {
	t.Helper()
	st, err := sessionstore.New(filepath.Join(t.TempDir(), "projects"), &sessionstore.Options{Holder: "test"})
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := st.Create("c1", sessionstore.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func addReports(t *testing.T, ob *sessionstore.Session, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, err := ob.AppendReport(contract.Report{IdempotencyKey: k, Kind: contract.ReportActivity, ConversationID: "c1", Activity: k}); err != nil {
			t.Fatal(err)
		}
	}
}

func newTestReporter(cp *controlPlane) *Reporter {
	return NewReporter(cp.srv.URL, &trust.Signer{Direction: trust.ToControlPlane, Tenant: testTenant, Env: testEnv, KeyID: testKeyID, Key: testKey}, nil)
}

func TestReporterDeliversFromTheOutboxOnce(t *testing.T) {
	cp := newControlPlane(t, 2, false) // the first two answers are lost
	ob := outbox(t)
	addReports(t, ob, "a", "b", "c")
	rp := newTestReporter(cp)
	rp.Notify(ob)
	for i := 0; i < 2; i++ {
		if err := rp.Flush(context.Background()); err == nil {
			t.Fatalf("flush %d succeeded against a failing control-plane", i)
		}
	}
	if err := rp.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, cp.keys()); diff != "" {
		t.Errorf("stored keys (-want +got):\n%s", diff)
	}
	if p, _ := ob.PendingReports(); len(p) != 0 {
		t.Errorf("%d reports still pending after delivery", len(p))
	}
	// Nothing is sent again once acknowledged.
	rp.Notify(ob)
	if err := rp.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if n := cp.deliveries(k); n != 3 {
			t.Errorf("%s delivered %d times, want 3 (two lost answers, one acknowledged)", k, n)
		}
	}
}

func TestReporterSurvivesRestart(t *testing.T) {
	cp := newControlPlane(t, 1, false)
	dir := filepath.Join(t.TempDir(), "projects")
	st, _ := sessionstore.New(dir, &sessionstore.Options{Holder: "w1"})
	s, _, err := st.Create("c1", sessionstore.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	addReports(t, s, "x", "y")
	rp := newTestReporter(cp)
	rp.Notify(s)
	if err := rp.Flush(context.Background()); err == nil {
		t.Fatal("expected the first delivery to fail")
	}
	s.Close() // the worker stops with the reports undelivered

	st2, _ := sessionstore.New(dir, &sessionstore.Options{Holder: "w2"})
	ids, err := st2.WithPendingReports()
	if err != nil || len(ids) != 1 || ids[0] != "c1" {
		t.Fatalf("WithPendingReports = %v, %v", ids, err)
	}
	s2, err := st2.Load("c1")
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	rp2 := newTestReporter(cp)
	rp2.Notify(s2)
	if err := rp2.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"x", "y"}, cp.keys()); diff != "" {
		t.Errorf("stored keys (-want +got):\n%s", diff)
	}
	if ids, _ := st2.WithPendingReports(); len(ids) != 0 {
		t.Errorf("still pending: %v", ids)
	}
}

func TestReporterRunDeliversInBatches(t *testing.T) {
	cp := newControlPlane(t, 0, false)
	ob := outbox(t)
	var keys []string
	for i := 0; i < maxBatch*2+5; i++ {
		keys = append(keys, fmt.Sprintf("k%03d", i))
	}
	addReports(t, ob, keys...)
	rp := newTestReporter(cp)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rp.Run(ctx); close(done) }()
	rp.Notify(ob)
	deadline := time.Now().Add(10 * time.Second)
	for len(cp.keys()) < len(keys) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
	cancel()
	<-done
	if diff := cmp.Diff(keys, cp.keys()); diff != "" {
		t.Errorf("stored keys (-want +got):\n%s", diff)
	}
	cp.mu.Lock()
	batches := cp.batches
	cp.mu.Unlock()
	if batches != 3 {
		t.Errorf("%d batches, want 3", batches)
	}
}

func TestNilReporter(t *testing.T) {
	var rp *Reporter
	rp.Notify(nil)
	if rp.Pending() != 0 || rp.Flush(context.Background()) != nil {
		t.Fatal("a nil reporter is not inert")
	}
}

func TestReporterDropsPermanentlyRefusedBatches(t *testing.T) {
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"code":"forbidden","message":"not yours"}}`, http.StatusForbidden)
	}))
	defer refuse.Close()
	ob := outbox(t)
	addReports(t, ob, "p1", "p2")
	rp := NewReporter(refuse.URL, &trust.Signer{Direction: trust.ToControlPlane, Tenant: testTenant, Env: testEnv, KeyID: testKeyID, Key: testKey}, nil)
	rp.Notify(ob)
	if err := rp.Flush(context.Background()); err != nil {
		t.Fatalf("a permanent refusal blocked the outbox: %v", err)
	}
	if p, _ := ob.PendingReports(); len(p) != 0 {
		t.Fatalf("%d refused reports still pending", len(p))
	}
}

// Run retries a failed delivery on its own, after the backoff's pause, with
// no new Notify: an outage of the control-plane delays reports, never
// strands them.
func TestReporterRunRetriesWithBackoff(t *testing.T) {
	cp := newControlPlane(t, 3, false) // the first three answers are lost
	ob := outbox(t)
	addReports(t, ob, "a", "b")
	if err := ob.Sync(); err != nil { // PendingReports counts durable reports
		t.Fatal(err)
	}
	rp := NewReporter(cp.srv.URL, &trust.Signer{Direction: trust.ToControlPlane, Tenant: testTenant, Env: testEnv, KeyID: testKeyID, Key: testKey},
		&ReporterOptions{Retry: backoff.Policy{Base: time.Millisecond, Max: 4 * time.Millisecond}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rp.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	rp.Notify(ob)
	poll.Until(t, "the reports are acknowledged", func() bool {
		p, err := ob.PendingReports()
		return err == nil && len(p) == 0
	})
	if diff := cmp.Diff([]string{"a", "b"}, cp.keys()); diff != "" {
		t.Errorf("stored keys (-want +got):\n%s", diff)
	}
	for _, k := range []string{"a", "b"} {
		if n := cp.deliveries(k); n != 4 {
			t.Errorf("%s delivered %d times, want 4 (three lost answers, one acknowledged)", k, n)
		}
	}
}

// Turns' replies make large reports: a batch of them stays under half the
// control-plane's body limit, so none is refused as too large and dropped.
func TestBatchBoundedInBytes(t *testing.T) {
	reply := strings.Repeat("\x01", contract.MaxReplyText) // 6 bytes each in JSON
	var pending []sessionstore.PendingReport
	for i := range 300 {
		pending = append(pending, sessionstore.PendingReport{Report: contract.Report{
			IdempotencyKey: fmt.Sprint("k", i), Kind: contract.ReportTurnEnded, ConversationID: "c", TurnID: "t",
			Reply: &contract.TurnReply{Text: reply}}})
	}
	for len(pending) > 0 {
		n := batchLen(pending)
		if n < 1 {
			t.Fatalf("batchLen = %d", n)
		}
		body, err := json.Marshal(contract.ReportBatch{Reports: func() []contract.Report {
			var rs []contract.Report
			for _, p := range pending[:n] {
				rs = append(rs, p.Report)
			}
			return rs
		}()})
		if err != nil {
			t.Fatal(err)
		}
		if len(body) > contract.MaxReportBatch {
			t.Fatalf("a batch of %d reports is %d bytes, more than %d", n, len(body), contract.MaxReportBatch)
		}
		pending = pending[n:]
	}
	small := make([]sessionstore.PendingReport, 500)
	if n := batchLen(small); n != maxBatch {
		t.Errorf("batchLen of 500 small reports = %d, want %d", n, maxBatch)
	}
}
