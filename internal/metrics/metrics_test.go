package metrics_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/talkide/platform/internal/anthropicsim"
	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/gateway"
	"github.com/talkide/platform/internal/metrics"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/sqlite"
	"github.com/talkide/platform/internal/store/storetest"
	"github.com/talkide/platform/internal/trust"
)

const simKey = "sk-sim-metrics-test-0123456789"

var (
	convA = store.Conversation{ID: "conv-a", Tenant: "acme", Env: "prod", UserID: "user-1"}
	convB = store.Conversation{ID: "conv-b", Tenant: "acme", Env: "prod", UserID: "user-2"}
	convC = store.Conversation{ID: "conv-c", Tenant: "globex", Env: "dev", UserID: "user-3"}
)

// stack is a control-plane whose gateway calls the simulator, with
// budgets and metrics as talkide controlplane wires them.
type stack struct {
	url    string
	keys   *trust.Keyring
	svc    *budget.Service
	served chan struct{} // a gateway request's handler has returned
}

func newStack(t *testing.T) *stack {
	t.Helper()
	up := httptest.NewServer(anthropicsim.New(simKey, nil))
	t.Cleanup(up.Close)
	st := storetest.Open(t, sqlite.Open, filepath.Join(t.TempDir(), "cp.db"))
	ctx := t.Context()
	for _, c := range []store.Conversation{convA, convB, convC} {
		if err := st.PutEnv(ctx, store.Env{Tenant: c.Tenant, Name: c.Env, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if err := st.PutUser(ctx, store.User{ID: c.UserID, Name: c.UserID, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		c.CreatedAt = time.Now()
		if _, _, err := st.CreateConversation(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := trust.NewKeyring("k1", map[string][]byte{"k1": bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	m := metrics.New(reg, nil)
	svc := budget.New(st, budget.DefaultPrices(), &budget.Options{Settled: m.Settled})
	m.CountReservations(svc.Reservations)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		svc.Close(ctx)
	})
	upURL, _ := url.Parse(up.URL)
	gw := gateway.New(upURL, simKey, keys, st, &gateway.Options{Budget: svc, Metrics: m})
	cp, err := controlplane.New(st, controlplane.Keys{Tokens: keys, CommandSecret: bytes.Repeat([]byte("s"), 32), CommandKeyID: "c1"},
		controlplane.TenantEnv{Tenant: "acme", Env: "prod"}, &controlplane.Options{
			Gateway: gw, Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		})
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{keys: keys, svc: svc, served: make(chan struct{}, 64)}
	h := cp.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if strings.HasPrefix(r.URL.Path, gateway.Prefix) {
			s.served <- struct{}{}
		}
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// call sends a model call for c (no credential when c is nil) and waits
// until the gateway is done with it.
func (s *stack) call(t *testing.T, c *store.Conversation, model, text string, stream bool) int {
	t.Helper()
	body := `{"model":"` + model + `","max_tokens":200,"stream":` + strconv.FormatBool(stream) +
		`,"messages":[{"role":"user","content":"` + text + `"}]}`
	req, _ := http.NewRequest(http.MethodPost, s.url+gateway.Prefix+"/v1/messages", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if c != nil {
		tok, _ := s.keys.MintWorkerToken(c.Tenant, c.Env, c.ID, time.Now())
		req.Header.Set("X-Worker-Token", tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	select {
	case <-s.served:
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway never finished the call")
	}
	return resp.StatusCode
}

// scrape reads /metrics: each sample by its name and labels, as printed.
func (s *stack) scrape(t *testing.T) (map[string]float64, string) {
	t.Helper()
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
	}
	return parseSamples(t, b), string(b)
}

// parseSamples reads the text exposition format: each sample by its name
// and labels, as printed.
func parseSamples(t *testing.T, b []byte) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// series names a sample as the exposition prints it: labels sorted by name.
func series(name string, labels ...string) string {
	var pairs []string
	for i := 0; i+1 < len(labels); i += 2 {
		pairs = append(pairs, labels[i]+`="`+labels[i+1]+`"`)
	}
	sort.Strings(pairs)
	if len(pairs) == 0 {
		return name
	}
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// only returns the samples of one metric.
func only(samples map[string]float64, name string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range samples {
		if k == name || strings.HasPrefix(k, name+"{") {
			out[k] = v
		}
	}
	return out
}

// TestScrapeAfterCalls sends calls through the control-plane's gateway to
// the simulator and checks every series /metrics then shows: requests by
// status class and model, the overhead histograms, denials, and tokens and
// cost exactly as the ledger charged them.
func TestScrapeAfterCalls(t *testing.T) {
	s := newStack(t)
	if err := s.svc.SetLimit(t.Context(), budget.Limit{Subject: budget.User(convB.UserID), Kind: budget.RequestsPerMinute, Max: 0}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		conv   *store.Conversation
		model  string
		text   string
		stream bool
		status int
	}{
		{&convA, "claude-sonnet-4-6", "hello", false, 200},
		{&convA, "claude-sonnet-4-6", "hello again, streamed", true, 200},
		{&convC, "claude-haiku-4-5-20251001", "dated model id", false, 200},
		{&convC, "someones-private-model-x", "a model the price list does not know", true, 200},
		{&convA, "claude-sonnet-4-6", "[[error:529]]", false, 529},
		{&convB, "claude-sonnet-4-6", "refused: no requests allowed", false, 429},
		{nil, "claude-sonnet-4-6", "no credential", false, 401},
	} {
		if got := s.call(t, c.conv, c.model, c.text, c.stream); got != c.status {
			t.Fatalf("%s: status %d, want %d", c.text, got, c.status)
		}
	}
	if err := s.svc.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	samples, text := s.scrape(t)

	req := func(tenant, env, model, code, origin string) string {
		return series("talkide_gateway_requests_total", "tenant", tenant, "env", env, "model", model, "code", code, "origin", origin)
	}
	want := map[string]float64{
		req("acme", "prod", "claude-sonnet-4-6", "2xx", "upstream"): 2,
		req("acme", "prod", "claude-sonnet-4-6", "5xx", "upstream"): 1,
		req("globex", "dev", "claude-haiku-4-5", "2xx", "upstream"): 1,
		req("globex", "dev", metrics.OtherModel, "2xx", "upstream"): 1,
		req("acme", "prod", "claude-sonnet-4-6", "4xx", "gateway"):  1,
		req("", "", "", "4xx", "gateway"):                           1,
	}
	if diff := cmp.Diff(want, only(samples, "talkide_gateway_requests_total")); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	want = map[string]float64{
		series("talkide_budget_denials_total", "tenant", "acme", "env", "prod", "scope", "user", "kind", "requests_per_minute", "stage", "admission"): 1,
	}
	if diff := cmp.Diff(want, only(samples, "talkide_budget_denials_total")); diff != "" {
		t.Errorf("denials (-want +got):\n%s", diff)
	}
	// One overhead sample of each kind per forwarded call (five), none for
	// the two refused.
	for _, h := range []string{"talkide_gateway_forward_overhead_seconds", "talkide_gateway_first_byte_overhead_seconds"} {
		if n := samples[h+"_count"]; n != 5 {
			t.Errorf("%s_count = %v, want 5", h, n)
		}
		if sum := samples[h+"_sum"]; sum <= 0 || sum > 5 {
			t.Errorf("%s_sum = %v s, want a little above 0", h, sum)
		}
		if inf := samples[series(h+"_bucket", "le", "+Inf")]; inf != 5 {
			t.Errorf("%s +Inf bucket = %v, want 5", h, inf)
		}
	}
	if v, ok := samples["talkide_budget_reservations_in_flight"]; !ok || v != 0 {
		t.Errorf("reservations in flight = %v (present %v), want 0", v, ok)
	}

	// Tokens, web searches and cost: what the ledger charged, per tenant,
	// env and model label.
	es, err := s.svc.Ledger(t.Context(), budget.LedgerQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 5 {
		t.Fatalf("%d ledger entries, want 5 (one per forwarded call)", len(es))
	}
	wantTokens, wantCalls := map[string]float64{}, map[string]float64{}
	wantCost := map[string]budget.Money{}
	label := map[string]string{"claude-sonnet-4-6": "claude-sonnet-4-6", "claude-haiku-4-5-20251001": "claude-haiku-4-5", "someones-private-model-x": metrics.OtherModel}
	for _, e := range es {
		model, ok := label[e.Model]
		if !ok {
			t.Fatalf("ledger entry of model %q", e.Model)
		}
		wantCalls[series("talkide_budget_settled_calls_total", "tenant", e.Tenant, "env", e.Env, "model", model)]++
		for typ, n := range map[string]int64{"input": e.InputTokens, "output": e.OutputTokens, "cache_write_5m": e.CacheWrite5mTokens,
			"cache_write_1h": e.CacheWrite1hTokens, "cache_read": e.CacheReadTokens} {
			if n > 0 {
				wantTokens[series("talkide_budget_tokens_total", "tenant", e.Tenant, "env", e.Env, "model", model, "type", typ)] += float64(n)
			}
		}
		if e.Cost > 0 {
			wantCost[series("talkide_budget_cost_dollars_total", "tenant", e.Tenant, "env", e.Env, "model", model)] += e.Cost
		}
	}
	if diff := cmp.Diff(wantCalls, only(samples, "talkide_budget_settled_calls_total")); diff != "" {
		t.Errorf("settled calls (-want +got):\n%s", diff)
	}
	if len(wantTokens) < 4 {
		t.Fatalf("the simulator's calls used too few kinds of tokens to test: %v", wantTokens)
	}
	if diff := cmp.Diff(wantTokens, only(samples, "talkide_budget_tokens_total")); diff != "" {
		t.Errorf("tokens (-want +got):\n%s", diff)
	}
	gotCost := only(samples, "talkide_budget_cost_dollars_total")
	if len(gotCost) != len(wantCost) || len(wantCost) != 3 {
		t.Errorf("cost series %v, want %v", gotCost, wantCost)
	}
	for k, w := range wantCost {
		if g := gotCost[k]; math.Abs(g-float64(w)/1e9) > 1e-12 {
			t.Errorf("%s = %v, want %s", k, g, w)
		}
	}
	if len(only(samples, "talkide_budget_web_searches_total")) != 0 {
		t.Error("web searches counted, but none was made")
	}

	// Nothing of a user, a conversation or a credential.
	for _, secret := range []string{convA.UserID, convB.UserID, convC.UserID, convA.ID, convC.ID, simKey, "someones-private-model-x"} {
		if strings.Contains(text, secret) {
			t.Errorf("/metrics reveals %q", secret)
		}
	}
}

// TestReservationsGauge: the gauge counts this process's calls holding a
// reservation, read at each scrape.
func TestReservationsGauge(t *testing.T) {
	s := newStack(t)
	if err := s.svc.SetLimit(t.Context(), budget.Limit{Subject: budget.Tenant("acme"), Kind: budget.SpendPerDay, Max: int64(budget.Dollar)}); err != nil {
		t.Fatal(err)
	}
	var holds []*budget.Hold
	for i := range 2 {
		h, err := s.svc.Reserve(t.Context(), budget.Call{ID: "r" + strconv.Itoa(i), Tenant: "acme", Env: "prod", User: convA.UserID,
			Conversation: convA.ID, Model: "claude-sonnet-4-6", RequestBytes: 400})
		if err != nil {
			t.Fatal(err)
		}
		holds = append(holds, h)
	}
	if samples, _ := s.scrape(t); samples["talkide_budget_reservations_in_flight"] != 2 {
		t.Errorf("reservations in flight = %v, want 2", samples["talkide_budget_reservations_in_flight"])
	}
	for _, h := range holds {
		h.Settle(budget.Settlement{Status: 200})
	}
	if err := s.svc.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if samples, _ := s.scrape(t); samples["talkide_budget_reservations_in_flight"] != 0 {
		t.Errorf("reservations in flight after settling = %v, want 0", samples["talkide_budget_reservations_in_flight"])
	}
}

func TestModelLabel(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry(), nil)
	for in, want := range map[string]string{
		"claude-sonnet-4-6": "claude-sonnet-4-6", "claude-haiku-4-5-20251001": "claude-haiku-4-5",
		"": "", "gpt-9": metrics.OtherModel, "claude-sonnet-4-6-20990101x": metrics.OtherModel,
	} {
		if got := m.Model(in); got != want {
			t.Errorf("Model(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSettledSeries: a ledger entry adds each kind of token, its web
// searches and its cost to its tenant, env and model; zero counts make no
// series.
func TestSettledSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, nil)
	e := budget.Entry{ID: "x", Tenant: "acme", Env: "prod", User: "user-1", Conversation: "conv-a",
		Usage: budget.Usage{Model: "claude-opus-4-1-20250805", InputTokens: 10, OutputTokens: 20, CacheWrite5mTokens: 30,
			CacheWrite1hTokens: 40, CacheReadTokens: 50, WebSearchRequests: 2},
		Cost: 1_500_000_000}
	m.Settled(e)
	m.Settled(e)
	e.Usage = budget.Usage{Model: "claude-opus-4-1", OutputTokens: 1}
	e.Cost = 0
	m.Settled(e)
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	got := parseSamples(t, rec.Body.Bytes())
	delete(got, "talkide_budget_reservations_in_flight")
	for k := range got {
		if !strings.HasPrefix(k, "talkide_budget_") {
			delete(got, k)
		}
	}
	l := []string{"tenant", "acme", "env", "prod", "model", "claude-opus-4-1"}
	tok := func(typ string) string { return series("talkide_budget_tokens_total", append(l, "type", typ)...) }
	want := map[string]float64{
		series("talkide_budget_settled_calls_total", l...): 3,
		tok("input"):          20,
		tok("output"):         41,
		tok("cache_write_5m"): 60,
		tok("cache_write_1h"): 80,
		tok("cache_read"):     100,
		series("talkide_budget_web_searches_total", l...): 4,
		series("talkide_budget_cost_dollars_total", l...): 3,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("samples (-want +got):\n%s", diff)
	}
}

// TestUnprovisionedTenantNoSeries: tokens signed with the control-plane's
// own key for tenant-envs nobody provisioned, over the control-plane's
// gateway, then a scrape: no series names them.
func TestUnprovisionedTenantNoSeries(t *testing.T) {
	s := newStack(t)
	for i, c := range []store.Conversation{
		{ID: convA.ID, Tenant: "invented-tenant-1", Env: "invented-env", UserID: "x"},
		{ID: "conv-nowhere", Tenant: "invented-tenant-2", Env: "invented-env", UserID: "x"},
	} {
		if got := s.call(t, &c, "claude-sonnet-4-6", "hello", false); got != http.StatusForbidden {
			t.Fatalf("call %d: status %d, want 403", i, got)
		}
	}
	samples, text := s.scrape(t)
	if strings.Contains(text, "invented") {
		t.Errorf("/metrics names a tenant-env that was never provisioned:\n%v", only(samples, "talkide_gateway_requests_total"))
	}
	want := map[string]float64{
		series("talkide_gateway_requests_total", "tenant", "", "env", "", "model", "", "code", "4xx", "origin", "gateway"): 2,
	}
	if diff := cmp.Diff(want, only(samples, "talkide_gateway_requests_total")); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

// TestTenantEnvCardinality: beyond MaxTenantEnvs, tenant-envs share the
// OtherTenantEnv labels, in every metric that has them; the ones admitted
// keep theirs, and the empty pair is not counted.
func TestTenantEnvCardinality(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, &metrics.Options{MaxTenantEnvs: 2})
	m.Request(gateway.RequestInfo{Status: 401})
	for i := range 5 {
		tenant := "t" + strconv.Itoa(i)
		m.Request(gateway.RequestInfo{Tenant: tenant, Env: "e", Model: "claude-sonnet-4-6", Status: 200, Upstream: true})
		m.Settled(budget.Entry{ID: "x" + tenant, Tenant: tenant, Env: "e", Usage: budget.Usage{Model: "claude-sonnet-4-6"}})
	}
	m.Request(gateway.RequestInfo{Tenant: "t0", Env: "e", Model: "claude-sonnet-4-6", Status: 200, Upstream: true})
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	samples := parseSamples(t, rec.Body.Bytes())
	req := func(tenant, env, model, code, origin string) string {
		return series("talkide_gateway_requests_total", "tenant", tenant, "env", env, "model", model, "code", code, "origin", origin)
	}
	o := metrics.OtherTenantEnv
	want := map[string]float64{
		req("", "", "", "4xx", "gateway"):                      1,
		req("t0", "e", "claude-sonnet-4-6", "2xx", "upstream"): 2,
		req("t1", "e", "claude-sonnet-4-6", "2xx", "upstream"): 1,
		req(o, o, "claude-sonnet-4-6", "2xx", "upstream"):      3,
	}
	if diff := cmp.Diff(want, only(samples, "talkide_gateway_requests_total")); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	call := func(tenant, env string) string {
		return series("talkide_budget_settled_calls_total", "tenant", tenant, "env", env, "model", "claude-sonnet-4-6")
	}
	want = map[string]float64{call("t0", "e"): 1, call("t1", "e"): 1, call(o, o): 3}
	if diff := cmp.Diff(want, only(samples, "talkide_budget_settled_calls_total")); diff != "" {
		t.Errorf("settled calls (-want +got):\n%s", diff)
	}
}

// TestStreamSeries checks the stream metrics: the gauges read their
// sources at each scrape, refusals are counted by cap, with every cap's
// series present from the start.
func TestStreamSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, nil)
	scrape := func() map[string]float64 {
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		got := parseSamples(t, rec.Body.Bytes())
		for k := range got {
			if !strings.Contains(k, "stream") && !strings.Contains(k, "connections") {
				delete(got, k)
			}
		}
		return got
	}
	want := map[string]float64{
		"talkide_streams_open":                                           0,
		"talkide_stream_upstreams_open":                                  0,
		"talkide_connections_shed_total":                                 0,
		series("talkide_streams_refused_total", "limit", "user"):         0,
		series("talkide_streams_refused_total", "limit", "conversation"): 0,
		series("talkide_streams_refused_total", "limit", "total"):        0,
	}
	if diff := cmp.Diff(want, scrape()); diff != "" {
		t.Errorf("before any stream (-want +got):\n%s", diff)
	}
	open, upstreams := 7, 2
	m.CountStreams(func() int { return open }, func() int { return upstreams })
	m.CountShedConnections(func() int64 { return 3 })
	m.StreamRefused("user")
	m.StreamRefused("user")
	m.StreamRefused("total")
	want["talkide_streams_open"], want["talkide_stream_upstreams_open"], want["talkide_connections_shed_total"] = 7, 2, 3
	want[series("talkide_streams_refused_total", "limit", "user")] = 2
	want[series("talkide_streams_refused_total", "limit", "total")] = 1
	if diff := cmp.Diff(want, scrape()); diff != "" {
		t.Errorf("with streams (-want +got):\n%s", diff)
	}
}
