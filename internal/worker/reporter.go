package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/trust"
)

// Reporter sends reports to the control-plane in signed batches and retries
// with backoff until they are acknowledged. Reports carry idempotency keys,
// so a batch resent after a lost answer counts nothing twice.
//
// The queue is in memory: reports queued when the process dies are lost. The
// durable outbox on the session volume is the session-store issue's work.
type Reporter struct {
	url    string
	signer *trust.Signer
	hc     *http.Client
	log    *slog.Logger

	mu sync.Mutex
	// guarded by mu
	queue []contract.Report
	// dropped counts reports ever dropped from the head of queue, so that
	// flush can tell how much of a batch in flight is still queued.
	dropped int
	wake    chan struct{} // buffered(1): something was queued

	maxQueue int
}

// ReporterOptions configure a Reporter.
type ReporterOptions struct {
	HTTPClient *http.Client // nil: 10 s timeout client
	Logger     *slog.Logger
	// MaxQueue bounds reports held while the control-plane is unreachable;
	// default 100,000. Beyond it the oldest are dropped and logged.
	MaxQueue int
}

// NewReporter returns a reporter posting to the control-plane at baseURL.
func NewReporter(baseURL string, signer *trust.Signer, opts *ReporterOptions) *Reporter {
	var o ReporterOptions
	if opts != nil {
		o = *opts
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxQueue <= 0 {
		o.MaxQueue = 100_000
	}
	return &Reporter{
		url:    strings.TrimRight(baseURL, "/") + contract.ReportsPath,
		signer: signer, hc: o.HTTPClient, log: o.Logger,
		wake: make(chan struct{}, 1), maxQueue: o.MaxQueue,
	}
}

// Enqueue queues r. A nil Reporter drops it.
func (rp *Reporter) Enqueue(r contract.Report) {
	if rp == nil {
		return
	}
	rp.mu.Lock()
	rp.queue = append(rp.queue, r)
	if over := len(rp.queue) - rp.maxQueue; over > 0 {
		rp.log.Error("report queue full; dropping the oldest reports", "dropped", over)
		rp.queue = append([]contract.Report(nil), rp.queue[over:]...)
		rp.dropped += over
	}
	rp.mu.Unlock()
	select {
	case rp.wake <- struct{}{}:
	default:
	}
}

// Pending is the number of reports not yet acknowledged.
func (rp *Reporter) Pending() int {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return len(rp.queue)
}

// Run sends batches until ctx ends, then makes one last attempt bounded by
// a short timeout.
func (rp *Reporter) Run(ctx context.Context) {
	backoff := 200 * time.Millisecond
	for {
		if rp.Pending() == 0 {
			select {
			case <-ctx.Done():
				return
			case <-rp.wake:
			}
		}
		err := rp.flush(ctx)
		if err == nil {
			backoff = 200 * time.Millisecond
			continue
		}
		if ctx.Err() != nil {
			final, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_ = rp.flush(final)
			cancel()
			return
		}
		rp.log.Warn("reports not delivered; will retry", "pending", rp.Pending(), "retry_in", backoff, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

const maxBatch = 200

func (rp *Reporter) flush(ctx context.Context) error {
	for {
		rp.mu.Lock()
		n := min(len(rp.queue), maxBatch)
		batch := append([]contract.Report(nil), rp.queue[:n]...)
		dropped := rp.dropped
		rp.mu.Unlock()
		if n == 0 {
			return nil
		}
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
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("control-plane answered %d", resp.StatusCode)
		}
		rp.mu.Lock()
		// Reports dropped meanwhile came off the head, that is off this
		// batch first; remove only what of the batch is still queued.
		rp.queue = rp.queue[max(n-(rp.dropped-dropped), 0):]
		rp.mu.Unlock()
	}
}
