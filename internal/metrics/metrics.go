// Package metrics holds the control-plane's Prometheus collectors: the
// gateway's requests and its own overhead, the tokens and cost the budget
// charged, budget denials and reservations in flight.
//
// Labels name tenants, envs and models only: never a user, a conversation or
// a credential. Model labels are bounded by the price list (any model it
// does not list is "other"), tenants and envs by provisioning and, should
// that fail, by MaxTenantEnvs.
package metrics

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/gateway"
)

// OtherModel is the label of a model the price list does not list.
const OtherModel = "other"

// OtherTenantEnv is the tenant and env label of every tenant-env beyond
// Options.MaxTenantEnvs. No id can be it: ids start with a letter or digit.
const OtherTenantEnv = "_other"

// DefaultMaxTenantEnvs is the default of Options.MaxTenantEnvs.
const DefaultMaxTenantEnvs = 1000

// LatencyBuckets are the bounds, in seconds, of the overhead histograms:
// 25 µs to 1 s, since the gateway's own work is meant to take well under a
// millisecond (docs/benchmarks.md).
var LatencyBuckets = []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 100e-3, 250e-3, 1}

// Options configures Metrics. The zero value is usable.
type Options struct {
	// Prices bounds the model label: a model it lists is its own label (a
	// dated id its undated one); any other is OtherModel. Nil:
	// budget.DefaultPrices().
	Prices *budget.Prices
	// MaxTenantEnvs bounds the tenant-env pairs that get series of their
	// own; later ones share OtherTenantEnv. The gateway and the budget
	// name only tenant-envs from the store, so this is a second line: a
	// bug, or a store that holds more than anyone scrapes, still cannot
	// grow a scrape without bound. 0: DefaultMaxTenantEnvs.
	MaxTenantEnvs int
}

// Metrics are the control-plane's collectors. It implements
// gateway.Metrics; its Settled method is budget.Options.Settled. It is safe
// for concurrent use.
type Metrics struct {
	prices *budget.Prices
	envs   tenantEnvs

	requests     *prometheus.CounterVec
	forward      prometheus.Histogram
	firstByte    prometheus.Histogram
	denials      *prometheus.CounterVec
	settled      *prometheus.CounterVec
	tokens       *prometheus.CounterVec
	webSearches  *prometheus.CounterVec
	cost         *prometheus.CounterVec
	reservations atomic.Pointer[func() int]

	streamsRefused *prometheus.CounterVec
	uploadsRefused *prometheus.CounterVec
	streamsOpen    atomic.Pointer[func() int]
	upstreamsOpen  atomic.Pointer[func() int]
	shed           atomic.Pointer[func() int64]
}

var _ gateway.Metrics = (*Metrics)(nil)

// New creates the collectors and registers them with reg (never the global
// default registry: pass the control-plane's own). It panics if they are
// registered there already.
func New(reg prometheus.Registerer, opts *Options) *Metrics {
	o := defaults.Copy(opts)
	if o.Prices == nil {
		o.Prices = budget.DefaultPrices()
	}
	defaults.IfNotPositive(&o.MaxTenantEnvs, DefaultMaxTenantEnvs)
	m := &Metrics{
		prices: o.Prices,
		envs:   tenantEnvs{max: o.MaxTenantEnvs, seen: make(map[[2]string]bool)},
		requests: counterVec("talkide_gateway_requests_total",
			"Requests the gateway answered, by tenant, env, model, status class (2xx, 4xx, 5xx, …) and origin of the status (upstream, or gateway for its own refusals and for an unreachable upstream).",
			"tenant", "env", "model", "code", "origin"),
		forward: latency("talkide_gateway_forward_overhead_seconds",
			"The gateway's own time before the upstream: from receiving a request to handing it to the upstream transport (body read, token check, conversation lookup, budget reservation)."),
		firstByte: latency("talkide_gateway_first_byte_overhead_seconds",
			"The gateway's own time on the way back: from the upstream's response reaching the gateway to its first bytes being flushed to the client."),
		denials: counterVec("talkide_budget_denials_total",
			"Calls a budget limit refused, by tenant, env, the limit's scope (user, tenant, env) and kind, and stage (admission: answered 429; mid_stream: a hard limit cut the stream).",
			"tenant", "env", "scope", "kind", "stage"),
		settled: counterVec("talkide_budget_settled_calls_total",
			"Calls charged in the budget ledger, by tenant, env and model billed.",
			"tenant", "env", "model"),
		tokens: counterVec("talkide_budget_tokens_total",
			"Tokens charged in the budget ledger, by tenant, env, model billed and type (input, output, cache_write_5m, cache_write_1h, cache_read).",
			"tenant", "env", "model", "type"),
		webSearches: counterVec("talkide_budget_web_searches_total",
			"Server-side web searches charged in the budget ledger, by tenant, env and model billed.",
			"tenant", "env", "model"),
		cost: counterVec("talkide_budget_cost_dollars_total",
			"Cost charged in the budget ledger, in US dollars, by tenant, env and model billed.",
			"tenant", "env", "model"),
	}
	inFlight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "talkide_budget_reservations_in_flight",
		Help: "Calls of this process holding a budget reservation now (admitted against a limit, not yet settled).",
	}, func() float64 { return read(&m.reservations) })
	m.streamsRefused = counterVec("talkide_streams_refused_total",
		"Browser event streams refused by a cap, by the cap (user, conversation: answered 429; total: answered 503).",
		"limit")
	for _, l := range []string{"user", "conversation", "total"} {
		m.streamsRefused.WithLabelValues(l)
	}
	m.uploadsRefused = counterVec("talkide_uploads_refused_total",
		"Attached files refused unread for want of room for their bytes in memory, by the bound (user: a user's share, answered 429; total: this control-plane's, worker: the worker's, answered 503).",
		"limit")
	for _, l := range []string{"user", "total", "worker"} {
		m.uploadsRefused.WithLabelValues(l)
	}
	streamsOpen := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "talkide_streams_open",
		Help: "Browser event streams open on this control-plane now.",
	}, func() float64 { return read(&m.streamsOpen) })
	upstreamsOpen := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "talkide_stream_upstreams_open",
		Help: "Event streams this control-plane holds open to workers now: one per conversation browsers follow, and one per browser catching up.",
	}, func() float64 { return read(&m.upstreamsOpen) })
	shed := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "talkide_connections_shed_total",
		Help: "Connections the control-plane's listener answered 503 and closed at once because it had as many open as its open-file limit allows.",
	}, func() float64 { return read(&m.shed) })
	reg.MustRegister(m.requests, m.forward, m.firstByte, m.denials, m.settled, m.tokens, m.webSearches, m.cost, inFlight,
		m.streamsRefused, m.uploadsRefused, streamsOpen, upstreamsOpen, shed)
	return m
}

// read is the value of the source p holds, or 0 before one is set.
func read[N int | int64](p *atomic.Pointer[func() N]) float64 {
	if f := p.Load(); f != nil {
		return float64((*f)())
	}
	return 0
}

// CountStreams makes open and upstreams the sources of the stream gauges,
// read at each scrape: (*controlplane.Server).StreamsOpen and
// StreamUpstreams.
func (m *Metrics) CountStreams(open, upstreams func() int) {
	m.streamsOpen.Store(&open)
	m.upstreamsOpen.Store(&upstreams)
}

// CountShedConnections makes f the source of the shed connections
// counter: (*fdlimit.Listener).Shed.
func (m *Metrics) CountShedConnections(f func() int64) { m.shed.Store(&f) }

// StreamRefused counts a browser stream refused by the cap named limit;
// it is controlplane.StreamMetrics.
func (m *Metrics) StreamRefused(limit string) { m.streamsRefused.WithLabelValues(limit).Inc() }

// UploadRefused counts an attached file refused by the bound named limit;
// it is controlplane.UploadMetrics.
func (m *Metrics) UploadRefused(limit string) { m.uploadsRefused.WithLabelValues(limit).Inc() }

// CountReservations makes f the source of the reservations gauge, read at
// each scrape: (*budget.Service).Reservations.
func (m *Metrics) CountReservations(f func() int) { m.reservations.Store(&f) }

// Model returns the label of model: its price list id, "" for none, or
// OtherModel.
func (m *Metrics) Model(model string) string {
	if model == "" {
		return ""
	}
	if id, ok := m.prices.Canonical(model); ok {
		return id
	}
	return OtherModel
}

// tenantEnvs admits the first max tenant-env pairs to labels of their own.
type tenantEnvs struct {
	max  int
	mu   sync.Mutex
	seen map[[2]string]bool // guarded by mu; the pairs admitted
}

// label returns the labels of a tenant-env: its own when it has them or
// there is room, else OtherTenantEnv twice. The empty pair (a request
// refused before its tenant-env was known) is always itself.
func (t *tenantEnvs) label(tenant, env string) (string, string) {
	if tenant == "" && env == "" {
		return "", ""
	}
	k := [2]string{tenant, env}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen[k] {
		return tenant, env
	}
	if len(t.seen) >= t.max {
		return OtherTenantEnv, OtherTenantEnv
	}
	t.seen[k] = true
	return tenant, env
}

// codeClass returns "2xx" for 200 and so on; "none" for no status.
func codeClass(status int) string {
	if status < 100 || status > 599 {
		return "none"
	}
	return strconv.Itoa(status/100) + "xx"
}

// Request implements gateway.Metrics.
func (m *Metrics) Request(r gateway.RequestInfo) {
	origin := "gateway"
	if r.Upstream {
		origin = "upstream"
	}
	tenant, env := m.envs.label(r.Tenant, r.Env)
	m.requests.WithLabelValues(tenant, env, m.Model(r.Model), codeClass(r.Status), origin).Inc()
}

// ForwardLatency implements gateway.Metrics.
func (m *Metrics) ForwardLatency(d time.Duration) { m.forward.Observe(d.Seconds()) }

// FirstByteLatency implements gateway.Metrics.
func (m *Metrics) FirstByteLatency(d time.Duration) { m.firstByte.Observe(d.Seconds()) }

// BudgetDenied implements gateway.Metrics. The denial's subject id (a user
// id, possibly) is not a label; its scope is.
func (m *Metrics) BudgetDenied(tenant, env string, d *budget.Denial) {
	stage := "admission"
	if d.MidStream {
		stage = "mid_stream"
	}
	tenant, env = m.envs.label(tenant, env)
	m.denials.WithLabelValues(tenant, env, string(d.Limit.Subject.Scope), string(d.Limit.Kind), stage).Inc()
}

// Settled counts a ledger entry: budget.Options.Settled.
func (m *Metrics) Settled(e budget.Entry) {
	model := m.Model(e.Model)
	tenant, env := m.envs.label(e.Tenant, e.Env)
	m.settled.WithLabelValues(tenant, env, model).Inc()
	for _, t := range []struct {
		typ string
		n   int64
	}{
		{"input", e.InputTokens},
		{"output", e.OutputTokens},
		{"cache_write_5m", e.CacheWrite5mTokens},
		{"cache_write_1h", e.CacheWrite1hTokens},
		{"cache_read", e.CacheReadTokens},
	} {
		if t.n > 0 {
			m.tokens.WithLabelValues(tenant, env, model, t.typ).Add(float64(t.n))
		}
	}
	if e.WebSearchRequests > 0 {
		m.webSearches.WithLabelValues(tenant, env, model).Add(float64(e.WebSearchRequests))
	}
	if e.Cost > 0 {
		m.cost.WithLabelValues(tenant, env, model).Add(float64(e.Cost) / float64(budget.Dollar))
	}
}

// counterVec is a counter vector named name, with help, by labels.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// latency is a histogram of seconds named name, with help, in
// LatencyBuckets.
func latency(name, help string) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: LatencyBuckets})
}
