package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/sessionstore"
	"github.com/talkide/platform/internal/trust"
)

// Outbox is where reports wait until the control-plane acknowledges them:
// a session's outbox on the session volume.
type Outbox interface {
	// Sync makes appended reports durable, so that a report is never sent
	// before it would survive a crash (and so never sent twice as two).
	Sync() error
	PendingReports() ([]sessionstore.PendingReport, error)
	// AckReports records delivery up to end; os.ErrClosed means the outbox
	// was closed and its next owner will send what is left.
	AckReports(end int64) error
}

// Reporter sends reports from session outboxes to the control-plane in
// signed batches and retries with backoff until they are acknowledged.
// Reports carry idempotency keys, so a batch resent after a lost answer
// counts nothing twice, and the outbox is durable, so a crash or a
// control-plane outage loses nothing.
type Reporter struct {
	url    string
	signer *trust.Signer
	hc     *http.Client
	log    *slog.Logger
	retry  backoff.Policy

	// flushing holds a token while a Flush runs, so that Flush calls take
	// turns: the one in Shutdown waits for a delivery Run has started (its
	// outbox is no longer in dirty) to be acknowledged before the sessions
	// close, instead of finding nothing to do.
	flushing chan struct{}

	mu sync.Mutex
	// guarded by mu
	dirty map[Outbox]struct{}
	wake  chan struct{} // buffered(1): an outbox became dirty
}

// ReporterOptions configure a Reporter.
type ReporterOptions struct {
	HTTPClient *http.Client // nil: 10 s timeout client
	Logger     *slog.Logger
	// Retry paces Run's retries after a failed delivery; zero fields mean
	// 200 ms growing to 30 s.
	Retry backoff.Policy
}

// NewReporter returns a reporter posting to the control-plane at baseURL.
func NewReporter(baseURL string, signer *trust.Signer, opts *ReporterOptions) *Reporter {
	o := defaults.Copy(opts)
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	defaults.Logger(&o.Logger)
	defaults.IfNotPositive(&o.Retry.Base, 200*time.Millisecond)
	defaults.IfNotPositive(&o.Retry.Max, 30*time.Second)
	return &Reporter{
		url:    strings.TrimRight(baseURL, "/") + contract.ReportsPath,
		signer: signer, hc: o.HTTPClient, log: o.Logger, retry: o.Retry,
		dirty: make(map[Outbox]struct{}), wake: make(chan struct{}, 1),
		flushing: make(chan struct{}, 1),
	}
}

// Notify tells the reporter that ob has reports to send. A nil Reporter
// ignores it (the reports stay in the outbox).
func (rp *Reporter) Notify(ob Outbox) {
	if rp == nil {
		return
	}
	rp.mu.Lock()
	rp.dirty[ob] = struct{}{}
	rp.mu.Unlock()
	select {
	case rp.wake <- struct{}{}:
	default:
	}
}

// Pending is the number of outboxes with reports not yet delivered.
func (rp *Reporter) Pending() int {
	if rp == nil {
		return 0
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return len(rp.dirty)
}

// Run delivers reports until ctx ends, retrying failed deliveries with
// backoff.
func (rp *Reporter) Run(ctx context.Context) {
	bo := backoff.New(rp.retry)
	for {
		if rp.Pending() == 0 {
			select {
			case <-ctx.Done():
				return
			case <-rp.wake:
			}
		}
		if err := rp.Flush(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			d := bo.Next()
			rp.log.Warn("reports not delivered; will retry", "outboxes", rp.Pending(), "retry_in", d, "err", err)
			if backoff.Sleep(ctx, d) != nil {
				return
			}
			continue
		}
		bo.Reset()
	}
}

// Flush delivers what every dirty outbox holds now, after any Flush in
// progress has ended. It returns the first delivery error; the outboxes
// that failed stay dirty.
func (rp *Reporter) Flush(ctx context.Context) error {
	if rp == nil {
		return nil
	}
	select {
	case rp.flushing <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-rp.flushing }()
	rp.mu.Lock()
	obs := make([]Outbox, 0, len(rp.dirty))
	for ob := range rp.dirty {
		obs = append(obs, ob)
		delete(rp.dirty, ob)
	}
	rp.mu.Unlock()
	var first error
	for i, ob := range obs {
		if err := rp.deliver(ctx, ob); err != nil {
			if errors.Is(err, os.ErrClosed) {
				continue
			}
			rp.mu.Lock()
			for _, rest := range obs[i:] {
				rp.dirty[rest] = struct{}{}
			}
			rp.mu.Unlock()
			first = err
			break
		}
	}
	return first
}

// A batch holds at most maxBatch reports and, unless it is one report,
// maxBatchBytes of them as JSON: a turn's reply is up to
// contract.MaxReplyText, and a batch the control-plane refuses as too
// large would be dropped.
const (
	maxBatch      = 200
	maxBatchBytes = contract.MaxReportBatch / 2
)

// batchLen returns how many of pending the next batch takes.
func batchLen(pending []sessionstore.PendingReport) int {
	size := 0
	for i, p := range pending[:min(len(pending), maxBatch)] {
		b, err := json.Marshal(p.Report)
		if err != nil {
			return max(i, 1) // post fails on it, alone
		}
		if size += len(b) + 1; size > maxBatchBytes && i > 0 {
			return i
		}
	}
	return min(len(pending), maxBatch)
}

func (rp *Reporter) deliver(ctx context.Context, ob Outbox) error {
	if err := ob.Sync(); err != nil {
		return err
	}
	pending, err := ob.PendingReports()
	if err != nil {
		return err
	}
	for len(pending) > 0 {
		n := batchLen(pending)
		batch := make([]contract.Report, n)
		for i := range batch {
			batch[i] = pending[i].Report
		}
		if err := rp.post(ctx, batch); err != nil {
			var perm *permanentError
			if !errors.As(err, &perm) {
				return err
			}
			// Retrying cannot help (the control-plane says the batch is
			// malformed or not ours to report): drop it loudly rather than
			// block every report behind it.
			keys := make([]string, len(batch))
			for i, r := range batch {
				keys[i] = r.IdempotencyKey
			}
			rp.log.Error("control-plane refused reports for good; dropping them", "status", perm.status, "keys", keys)
		}
		if err := ob.AckReports(pending[n-1].End); err != nil {
			return err
		}
		pending = pending[n:]
	}
	return nil
}

func (rp *Reporter) post(ctx context.Context, batch []contract.Report) error {
	body, err := json.Marshal(contract.ReportBatch{Reports: batch})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rp.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	rp.signer.Sign(req, body)
	resp, err := rp.hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusBadRequest, http.StatusForbidden, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return &permanentError{status: resp.StatusCode}
	}
	return fmt.Errorf("control-plane answered %d", resp.StatusCode)
}

// permanentError is an answer that no retry of the same batch can change.
type permanentError struct{ status int }

func (e *permanentError) Error() string {
	return fmt.Sprintf("control-plane refused the reports (%d)", e.status)
}
