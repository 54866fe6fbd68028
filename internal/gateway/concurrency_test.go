// Hundreds of calls of one user at once, near the user's limit, against
// SQLite and against PostgreSQL with two gateways (each with its own
// budget service and connection pool) on one database.

package gateway

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/store/postgres"
	"github.com/talkide/platform/internal/store/postgres/pgtest"
	"github.com/talkide/platform/internal/store/sqlite"
)

// Each call costs exactly callCost: the upstream reports input tokens of a
// quarter of the request's bytes (400 bytes: 100 tokens at $1 per million)
// and 100 output tokens (at $2 per million).
const (
	callCost   = budget.Money(100*1000 + 100*2000)
	callers    = 300
	inFlightRA = 1 // seconds: the Retry-After of a denial caused by calls in flight
)

// concurrencyBody is a 400-byte request.
var concurrencyBody = func() string {
	head := `{"model":"claude-test-1","max_tokens":4096,"stream":true,"messages":[{"role":"user","content":"`
	tail := `"}]}`
	return head + strings.Repeat("x", 400-len(head)-len(tail)) + tail
}()

// fixedUsageUpstream streams a short answer whose usage is fixed by the
// request's size, as described at callCost.
func fixedUsageUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":%q,\"usage\":{\"input_tokens\":%d,\"output_tokens\":1}}}\n\n", testModel, (len(b)+3)/4)
		w.(http.Flusher).Flush()
		io.WriteString(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\n")
		io.WriteString(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":100}}\n\n")
		io.WriteString(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	})
}

// noon is the services' clock: a fixed time, so that the day cannot end
// during the test and a denial for an exhausted day is told apart from one
// for calls in flight by its Retry-After.
var noon = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func concurrencyOptions(leaseCalls int) *budget.Options {
	return &budget.Options{Now: func() time.Time { return noon }, InFlightRetry: inFlightRA * time.Second, LeaseCalls: leaseCalls}
}

// admissions are the ways the budget service admits calls: a reservation
// per call, slices as configured by default, and slices of one call's room
// (a growth nearly every call: the most admissions racing in the store).
var admissions = []struct {
	name       string
	leaseCalls int
}{{"PerCall", -1}, {"Slices", 0}, {"SmallSlices", 1}}

// hammer fires callers concurrent clients for convA's user at the gateways,
// round robin. Each sends calls until it is refused for good (a Retry-After
// longer than inFlightRA); a refusal caused by calls in flight it retries,
// as a client honouring Retry-After would, only sooner. It returns how many
// calls succeeded.
func hammer(t *testing.T, hs []*harness) int64 {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: callers, MaxConnsPerHost: callers}}
	defer client.CloseIdleConnections()
	var (
		wg          sync.WaitGroup
		ok, retries atomic.Int64
		start       = make(chan struct{})
	)
	deadline := time.Now().Add(2 * time.Minute)
	for i := range callers {
		h := hs[i%len(hs)]
		tok := h.mint(convA)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for time.Now().Before(deadline) {
				req, err := http.NewRequest(http.MethodPost, h.url+"/v1/messages", strings.NewReader(concurrencyBody))
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("X-Worker-Token", tok)
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
					if ra > inFlightRA {
						return // the limit is spent
					}
					retries.Add(1)
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // a client's backoff, shortened
				default:
					t.Errorf("status %d: %s", resp.StatusCode, body)
					return
				}
			}
			t.Error("the calls did not end within two minutes")
		}()
	}
	close(start)
	wg.Wait()
	t.Logf("%d calls through %d gateway(s): %d succeeded, %d refused while others were in flight", ok.Load()+retries.Load(), len(hs), ok.Load(), retries.Load())
	return ok.Load()
}

// checkSpend checks that the user's committed spend never passed the limit
// and reached it to within one call's cost, that every successful call
// was charged once, and that nothing is held any more.
func checkSpend(t *testing.T, svcs []*budget.Service, limit budget.Money, succeeded int64) {
	t.Helper()
	for _, svc := range svcs {
		flush(t, svc)
	}
	st, err := svcs[0].Status(context.Background(), budget.User(convA.UserID))
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 {
		t.Fatalf("status %+v", st)
	}
	spent := budget.Money(st[0].Used)
	t.Logf("limit %v, spent %v in %d calls", limit, spent, succeeded)
	if spent > limit {
		t.Errorf("spent %v, over the limit %v", spent, limit)
	}
	if spent <= limit-callCost {
		t.Errorf("spent %v: the limit %v was not reached to within one call (%v)", spent, limit, callCost)
	}
	if spent != budget.Money(succeeded)*callCost {
		t.Errorf("spent %v for %d successful calls of %v each", spent, succeeded, callCost)
	}
	if st[0].Held != 0 {
		t.Errorf("%v still held after every call ended", budget.Money(st[0].Held))
	}
	es, err := svcs[0].Ledger(context.Background(), budget.LedgerQuery{User: convA.UserID})
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(es)) != succeeded {
		t.Errorf("%d ledger entries for %d calls", len(es), succeeded)
	}
}

// limitFor is a spending limit of n and a half calls: n fit, the next does
// not.
func limitFor(n int) budget.Money { return budget.Money(n)*callCost + callCost/2 }

func TestConcurrentSQLite(t *testing.T) {
	for _, a := range admissions {
		t.Run(a.name, func(t *testing.T) {
			st, err := sqlite.Open(t.Context(), t.TempDir()+"/cp.db", nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			svc := budget.New(st, testPrices(t), concurrencyOptions(a.leaseCalls))
			t.Cleanup(func() { svc.Close(context.Background()) })
			limit := limitFor(40)
			if err := svc.SetLimit(t.Context(), budget.Limit{Subject: budget.User(convA.UserID), Kind: budget.SpendPerDay, Max: int64(limit)}); err != nil {
				t.Fatal(err)
			}
			h := newHarness(t, fixedUsageUpstream(), &Options{Budget: svc})
			checkSpend(t, []*budget.Service{svc}, limit, hammer(t, []*harness{h}))
		})
	}
}

func TestConcurrentPostgresTwoGateways(t *testing.T) {
	for _, a := range admissions {
		t.Run(a.name, func(t *testing.T) {
			url := pgtest.URL(t) // a database of its own
			var (
				hs   []*harness
				svcs []*budget.Service
			)
			up := fixedUsageUpstream()
			for range 2 {
				st, err := postgres.Open(t.Context(), url, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				svc := budget.New(st, testPrices(t), concurrencyOptions(a.leaseCalls))
				t.Cleanup(func() { svc.Close(context.Background()) })
				svcs = append(svcs, svc)
				hs = append(hs, newHarness(t, up, &Options{Budget: svc}))
			}
			limit := limitFor(60)
			if err := svcs[0].SetLimit(t.Context(), budget.Limit{Subject: budget.User(convA.UserID), Kind: budget.SpendPerDay, Max: int64(limit)}); err != nil {
				t.Fatal(err)
			}
			checkSpend(t, svcs, limit, hammer(t, hs))
		})
	}
}
