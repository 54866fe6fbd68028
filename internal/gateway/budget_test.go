// The gateway with a budget: accounting golden tests from recorded
// Anthropic-shaped streams, denials, the hard stop, and many calls of one
// user at once against SQLite and PostgreSQL.

package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/store/sqlite"
)

var update = flag.Bool("update", false, "rewrite the want sections of testdata/accounting/*.txtar")

// testPrices are the built-in prices plus the canned upstream's models, as
// an operator's price file would add them: $1 input, $2 output per million
// tokens, so that a token is 1,000 or 2,000 nanodollars.
func testPrices(t testing.TB) *budget.Prices {
	t.Helper()
	p, err := budget.DefaultPrices().Override([]byte(`{"models":{
		"claude-test-1":    {"input":"1","output":"2","cache_write_5m":"1.25","cache_write_1h":"2","cache_read":"0.10"},
		"claude-req-model": {"input":"1","output":"2","cache_write_5m":"1.25","cache_write_1h":"2","cache_read":"0.10"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newBudget returns a budget service over a private in-memory SQLite
// database, closed when t ends.
func newBudget(t testing.TB, opts *budget.Options) *budget.Service {
	t.Helper()
	st, err := sqlite.Open(context.Background(), ":memory:", nil)
	if err != nil {
		t.Fatal(err)
	}
	svc := budget.New(st, testPrices(t), opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		svc.Close(ctx)
		st.Close()
	})
	return svc
}

// flush waits for the service's settlements and returns its slices' slack.
func flush(t testing.TB, svc *budget.Service) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := svc.Flush(ctx); err != nil {
		t.Fatal("settlements did not finish:", err)
	}
	// And the slack of the service's slices, so that what is held is what
	// calls in flight hold.
	svc.Release(ctx)
}

// archive is a txtar archive: a comment, then files, each after a line
// "-- name --".
type archive struct {
	comment string
	files   []archiveFile
}

type archiveFile struct{ name, data string }

func parseArchive(s string) archive {
	var a archive
	cur := &a.comment
	for line := range strings.Lines(s) {
		if name, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "-- "); ok && strings.HasSuffix(name, " --") {
			a.files = append(a.files, archiveFile{name: strings.TrimSuffix(name, " --")})
			cur = &a.files[len(a.files)-1].data
			continue
		}
		*cur += line
	}
	return a
}

func (a archive) get(name string) string {
	for _, f := range a.files {
		if f.name == name {
			return f.data
		}
	}
	return ""
}

func (a *archive) set(name, data string) {
	for i := range a.files {
		if a.files[i].name == name {
			a.files[i].data = data
			return
		}
	}
	a.files = append(a.files, archiveFile{name, data})
}

func (a archive) format() string {
	var b strings.Builder
	b.WriteString(a.comment)
	for _, f := range a.files {
		fmt.Fprintf(&b, "-- %s --\n%s", f.name, f.data)
	}
	return b.String()
}

// Control lines of a golden upstream body (not sent).
const (
	waitGone = "#wait until the client is gone\n"
	hang     = "#hang\n"
)

// goldenUpstream replays a golden upstream section: a first line "STATUS
// CONTENT-TYPE", then the body, an event per write and flush; at a line
// waitGone it waits until the gateway's client has gone, at a line hang
// until its own request is cancelled.
func goldenUpstream(t *testing.T, h **harness, section string) http.Handler {
	first, body, _ := strings.Cut(section, "\n")
	code, ctype, _ := strings.Cut(first, " ")
	status, err := strconv.Atoi(code)
	if err != nil {
		t.Fatalf("upstream status line %q", first)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype)
		w.Header().Set("Request-Id", "req_golden")
		w.WriteHeader(status)
		rest := body
		for rest != "" {
			var chunk string
			chunk, rest, _ = strings.Cut(rest, "\n\n")
			chunk += "\n\n"
			if rest == "" && !strings.HasSuffix(body, "\n\n") {
				chunk = strings.TrimSuffix(chunk, "\n\n")
			}
			for {
				switch {
				case strings.HasPrefix(chunk, waitGone):
					chunk = strings.TrimPrefix(chunk, waitGone)
					select {
					case <-(*h).gone:
					case <-time.After(waitLimit):
						t.Error("the client never went away")
					}
					continue
				case strings.HasPrefix(chunk, hang):
					<-r.Context().Done()
					return
				}
				break
			}
			io.WriteString(w, chunk)
			w.(http.Flusher).Flush()
		}
	})
}

// goldenStream is the body a client should get for an upstream section.
func goldenBody(section string) string {
	_, body, _ := strings.Cut(section, "\n")
	return strings.NewReplacer(waitGone, "", hang, "").Replace(body)
}

// ledgerView is what a golden file holds of a ledger entry.
type ledgerView struct {
	Model              string `json:"model"`
	Status             int    `json:"status"`
	Streamed           bool   `json:"streamed"`
	Estimated          bool   `json:"estimated"`
	InputTokens        int64  `json:"input_tokens"`
	OutputTokens       int64  `json:"output_tokens"`
	CacheWrite5mTokens int64  `json:"cache_write_5m_tokens"`
	CacheWrite1hTokens int64  `json:"cache_write_1h_tokens"`
	CacheReadTokens    int64  `json:"cache_read_tokens"`
	WebSearchRequests  int64  `json:"web_search_requests"`
	WebFetchRequests   int64  `json:"web_fetch_requests"`
	Cost               string `json:"cost"`
}

func viewOf(e budget.Entry) ledgerView {
	return ledgerView{
		Model: e.Model, Status: e.Status, Streamed: e.Streamed, Estimated: e.Estimated,
		InputTokens: e.InputTokens, OutputTokens: e.OutputTokens,
		CacheWrite5mTokens: e.CacheWrite5mTokens, CacheWrite1hTokens: e.CacheWrite1hTokens,
		CacheReadTokens: e.CacheReadTokens, WebSearchRequests: e.WebSearchRequests, WebFetchRequests: e.WebFetchRequests,
		Cost: e.Cost.String(),
	}
}

// TestAccountingGolden replays each testdata/accounting/*.txtar through the
// gateway and compares the call's ledger entry, cost included, with the
// file's want section (go test -run TestAccountingGolden -update rewrites
// them; the comment of each file works the cost out by hand).
func TestAccountingGolden(t *testing.T) {
	paths, err := filepath.Glob("testdata/accounting/*.txtar")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no golden files (%v)", err)
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txtar"), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			a := parseArchive(string(raw))
			up := a.get("upstream")
			drain := 10 * time.Second
			if strings.Contains(up, hang) {
				drain = 100 * time.Millisecond
			}
			svc := newBudget(t, nil)
			var h *harness
			h = newHarness(t, goldenUpstream(t, &h, up), &Options{Budget: svc, DrainTimeout: drain})

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			resp := postCancellable(ctx, t, h, a.get("request.json"))
			defer resp.Body.Close()
			switch client := strings.TrimSpace(a.get("client")); {
			case client == "read":
				if got, want := readAll(t, resp.Body), goldenBody(up); got != want {
					t.Errorf("the client got\n%s\nwant the upstream's\n%s", got, want)
				}
			case strings.HasPrefix(client, "disconnect after "):
				n, _ := strconv.Atoi(strings.Fields(client)[2])
				br := bufio.NewReader(resp.Body)
				for range n {
					readEvent(t, br)
				}
				cancel()
			default:
				t.Fatalf("client %q", client)
			}
			h.waitServed(t)
			flush(t, svc)
			es, err := svc.Ledger(t.Context(), budget.LedgerQuery{})
			if err != nil {
				t.Fatal(err)
			}
			if len(es) != 1 {
				t.Fatalf("%d ledger entries, want 1", len(es))
			}
			got, err := json.MarshalIndent(viewOf(es[0]), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				a.set("want", string(got)+"\n")
				if err := os.WriteFile(path, []byte(a.format()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if diff := cmp.Diff(strings.TrimSpace(a.get("want")), string(got)); diff != "" {
				t.Errorf("ledger entry (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBudgetDenied: a call over a limit never reaches the upstream and gets
// a 429 with Retry-After and an Anthropic rate_limit_error body saying which
// limit, which the official SDK returns as its typed error.
func TestBudgetDenied(t *testing.T) {
	up, hits := countedAnthropic(64)
	svc := newBudget(t, nil)
	h := newHarness(t, up, &Options{Budget: svc})
	if err := svc.SetLimit(t.Context(), budget.Limit{Subject: budget.User(convA.UserID), Kind: budget.SpendPerDay, Max: 0}); err != nil {
		t.Fatal(err)
	}

	resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), requestBody)
	body := readAll(t, resp.Body)
	h.waitServed(t)
	if resp.StatusCode != http.StatusTooManyRequests || decodeError(t, body) != errRateLimit {
		t.Fatalf("got %d %s, want 429 rate_limit_error", resp.StatusCode, body)
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 24*3600 {
		t.Errorf("Retry-After = %q, want seconds until the day ends", resp.Header.Get("Retry-After"))
	}
	if !strings.Contains(body, "user user-1 spending limit per day reached") {
		t.Errorf("the message does not say which limit: %s", body)
	}
	select {
	case <-hits:
		t.Error("a refused call reached the upstream")
	default:
	}

	// The SDK, streaming and not: its typed error, status 429.
	client := sdkClient(h, h.mint(convA), convA.ID)
	_, err := client.Messages.New(t.Context(), sdkParams)
	checkSDK429(t, err)
	stream := client.Messages.NewStreaming(t.Context(), sdkParams)
	for stream.Next() {
	}
	checkSDK429(t, stream.Err())

	// Another user is not limited; count_tokens is never limited.
	if resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convB)), requestBody); resp.StatusCode != 200 {
		t.Errorf("user without limits: status %d", resp.StatusCode)
	}
	if resp := h.post(t, "/v1/messages/count_tokens", tokenHeader(h.mint(convA)), requestBody); resp.StatusCode != 200 {
		t.Errorf("count_tokens: status %d", resp.StatusCode)
	}
}

func checkSDK429(t *testing.T, err error) {
	t.Helper()
	apiErr, ok := errors.AsType[*anthropic.Error](err)
	if !ok {
		t.Fatalf("err = %v, want an *anthropic.Error", err)
	}
	if apiErr.StatusCode != http.StatusTooManyRequests || string(apiErr.Type()) != errRateLimit || !strings.Contains(apiErr.Message, "spending limit per day") {
		t.Errorf("got %d %q %q, want 429 rate_limit_error naming the limit", apiErr.StatusCode, apiErr.Type(), apiErr.Message)
	}
	if apiErr.Response == nil || apiErr.Response.Header.Get("Retry-After") == "" {
		t.Error("the SDK's error has no Retry-After")
	}
}

// TestBudgetSDK: the SDK's calls through the gateway are admitted and
// charged, streamed and not.
func TestBudgetSDK(t *testing.T) {
	svc := newBudget(t, nil)
	h := newHarness(t, fakeAnthropic(), &Options{Budget: svc})
	if err := svc.SetLimit(t.Context(), budget.Limit{Subject: budget.User(convA.UserID), Kind: budget.SpendPerDay, Max: int64(budget.Dollar)}); err != nil {
		t.Fatal(err)
	}
	client := sdkClient(h, h.mint(convA), convA.ID)
	if _, err := client.Messages.New(t.Context(), sdkParams); err != nil {
		t.Fatal(err)
	}
	stream := client.Messages.NewStreaming(t.Context(), sdkParams)
	for stream.Next() {
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	h.waitServed(t)
	h.waitServed(t)
	flush(t, svc)
	es, err := svc.Ledger(t.Context(), budget.LedgerQuery{User: convA.UserID})
	if err != nil {
		t.Fatal(err)
	}
	// claude-test-1: $1 input, $1.25 5m writes, $0.10 reads, $2 output per million.
	want := map[bool]budget.Money{
		false: 12*1000 + 3*1250 + 4*100 + 6*2000,      // cannedJSONUsage
		true:  25*1000 + 100*1250 + 200*100 + 15*2000, // cannedStreamUsage
	}
	if len(es) != 2 {
		t.Fatalf("%d ledger entries, want 2", len(es))
	}
	for _, e := range es {
		if e.Cost != want[e.Streamed] || e.Estimated || e.Reserved <= 0 || e.Model != testModel {
			t.Errorf("entry %+v: want cost %v, not estimated, a reservation", e, want[e.Streamed])
		}
	}
	st, err := svc.Status(t.Context(), budget.User(convA.UserID))
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].Used != int64(want[false]+want[true]) || st[0].Held != 0 {
		t.Errorf("status = %+v, want %v used and nothing held", st, want[false]+want[true])
	}
}

// hardStreamUpstream streams n text deltas of 40 characters (10 tokens
// each), reporting output consistently with that, and records whether its
// caller cancelled it.
func hardStreamUpstream(n int, cancelled chan<- struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\""+testModel+"\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n")
		io.WriteString(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
		for range n {
			_, err := io.WriteString(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\""+strings.Repeat("x", 40)+"\"}}\n\n")
			w.(http.Flusher).Flush()
			if err != nil || r.Context().Err() != nil {
				close(cancelled)
				return
			}
		}
		io.WriteString(w, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
		fmt.Fprintf(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":%d}}\n\n", n*10)
		io.WriteString(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	})
}

// TestHardStop: when a hard limit is reached mid-stream, the stream is cut
// off after a whole event with a final error event, the upstream call is
// cancelled, and the user is charged no more than the limit.
func TestHardStop(t *testing.T) {
	const limit = budget.Money(1_000_000) // $0.001: 25 input tokens and about 487 output tokens
	svc := newBudget(t, &budget.Options{DefaultOutputTokens: 100})
	cancelled := make(chan struct{})
	// A stream far longer than the limit: only a cut ends it early.
	h := newHarness(t, hardStreamUpstream(1_000_000, cancelled), &Options{Budget: svc})
	if err := svc.SetLimit(t.Context(), budget.Limit{Subject: budget.User(convA.UserID), Kind: budget.SpendPerDay, Max: int64(limit), Hard: true}); err != nil {
		t.Fatal(err)
	}
	client := sdkClient(h, h.mint(convA), convA.ID)
	stream := client.Messages.NewStreaming(t.Context(), sdkParams)
	var text int
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "content_block_delta" {
			text += len(ev.Delta.Text)
		}
	}
	err := stream.Err()
	if err == nil || !strings.Contains(err.Error(), "rate_limit_error") || !strings.Contains(err.Error(), "cut off") {
		t.Fatalf("stream error = %v, want the gateway's rate_limit_error event", err)
	}
	select {
	case <-cancelled:
	case <-time.After(waitLimit):
		t.Fatal("the upstream call went on after the cut")
	}
	h.waitServed(t)
	flush(t, svc)
	es, err := svc.Ledger(t.Context(), budget.LedgerQuery{User: convA.UserID})
	if err != nil || len(es) != 1 {
		t.Fatalf("ledger: %v, %v", es, err)
	}
	e := es[0]
	margin := budget.Money(budget.DefaultHardStopMargin+10) * 2000
	if !e.Estimated || e.Cost > limit || e.Cost < limit-margin {
		t.Errorf("charged %v (estimated %v), want at most the limit %v and within %v of it", e.Cost, e.Estimated, limit, margin)
	}
	if want := int64(e.Cost-25*1000) / 2000 * 4; int64(text) != want {
		t.Errorf("the client got %d characters of text; the charge is for %d", text, want)
	}
	// The next call is refused at once.
	_, err = client.Messages.New(t.Context(), sdkParams)
	checkSDK429(t, err)
}

// TestCountTokensCountedByRequestsPerMinute: count_tokens is free, but a
// request: thirty in a row against a limit of one request a minute pass
// once, the rest are the budget's 429 and never reach the upstream; a
// spending limit with no room does not stop it.
func TestCountTokensCountedByRequestsPerMinute(t *testing.T) {
	up, hits := countedAnthropic(64)
	now := time.Date(2026, 11, 30, 12, 0, 30, 0, time.UTC)
	svc := newBudget(t, &budget.Options{Now: func() time.Time { return now }})
	h := newHarness(t, up, &Options{Budget: svc})
	if err := svc.SetLimit(t.Context(), budget.Limit{Subject: budget.User(convA.UserID), Kind: budget.RequestsPerMinute, Max: 1}); err != nil {
		t.Fatal(err)
	}
	if err := svc.SetLimit(t.Context(), budget.Limit{Subject: budget.User(convB.UserID), Kind: budget.SpendPerDay, Max: 0}); err != nil {
		t.Fatal(err)
	}
	statuses := map[int]int{}
	for range 30 {
		resp := h.post(t, "/v1/messages/count_tokens", tokenHeader(h.mint(convA)), requestBody)
		body := readAll(t, resp.Body)
		h.waitServed(t)
		statuses[resp.StatusCode]++
		if resp.StatusCode == http.StatusTooManyRequests && (decodeError(t, body) != errRateLimit || !strings.Contains(body, "requests_per_minute")) {
			t.Fatalf("429 that is not the budget's requests-per-minute denial: %s", body)
		}
	}
	if diff := cmp.Diff(map[int]int{200: 1, 429: 29}, statuses); diff != "" {
		t.Errorf("statuses of 30 count_tokens calls against 1 a minute (-want +got):\n%s", diff)
	}
	if len(hits) != 1 {
		t.Errorf("%d calls reached the upstream, want 1", len(hits))
	}
	resp := h.post(t, "/v1/messages", tokenHeader(h.mint(convA)), requestBody)
	readAll(t, resp.Body)
	h.waitServed(t)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a message after count_tokens used the minute's request: status %d, want 429", resp.StatusCode)
	}
	resp = h.post(t, "/v1/messages/count_tokens", tokenHeader(h.mint(convB)), requestBody)
	readAll(t, resp.Body)
	h.waitServed(t)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("count_tokens under a spent daily limit: status %d, want 200 (it costs nothing)", resp.StatusCode)
	}
}
