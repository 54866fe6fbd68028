package roles

import (
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/worker"
)

// workerMetrics returns the handler of a worker replica's /metrics: its
// load read at each scrape (so nothing is counted twice and nothing on
// the command path waits for Prometheus), with Go's runtime and process
// collectors, on a registry of its own. Counts only: no conversation,
// user or token appears, so the endpoint needs no authentication, as the
// control-plane's does not; an autoscaler reads turns_running.
func workerMetrics(w *worker.Worker, log *slog.Logger) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	gauge := func(name, help string, v func(worker.LoadStats) int) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return float64(v(w.Load())) }))
	}
	gauge("talkide_worker_turns_running", "Turns this worker replica runs now.",
		func(l worker.LoadStats) int { return l.RunningTurns })
	gauge("talkide_worker_turns_max", "The bound on turns run at once (0: none); beyond it a message is refused with worker_busy.",
		func(l worker.LoadStats) int { return l.MaxRunningTurns })
	gauge("talkide_worker_sessions_open", "Conversations this replica holds open, and leased, now.",
		func(l worker.LoadStats) int { return l.OpenSessions })
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "talkide_worker_commands_total", Help: "Signed commands this replica answered (refused ones included).",
	}, func() float64 { return float64(w.Load().Commands) }))
	reg.MustRegister(labelled{w})
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)})
}

// labelled exports the counters kept by a label (refused commands by
// code, forwarded ones and released sessions by reason), from one reading
// of the worker's load.
type labelled struct{ w *worker.Worker }

var (
	refusedDesc = prometheus.NewDesc("talkide_worker_commands_refused_total",
		"Commands this replica refused before doing anything, by code: worker_busy (its bound on running turns reached) or session_elsewhere (another replica holds the conversation and could not be reached, or advertises no address: a command the control-plane sent that reached no holder).",
		[]string{"code"}, nil)
	forwardedDesc = prometheus.NewDesc("talkide_worker_commands_forwarded_total",
		"Verified commands this replica forwarded to a peer, by reason: holder (the peer holds the conversation) or placement (nobody did, and the peer was less loaded).",
		[]string{"reason"}, nil)
	releasedDesc = prometheus.NewDesc("talkide_worker_sessions_released_total",
		"Idle sessions this replica gave up for a peer to take, by reason: rebalance (it held clearly more than the replicas' mean) or drain (it was shutting down).",
		[]string{"reason"}, nil)
)

func (r labelled) Describe(ch chan<- *prometheus.Desc) {
	ch <- refusedDesc
	ch <- forwardedDesc
	ch <- releasedDesc
}

func (r labelled) Collect(ch chan<- prometheus.Metric) {
	l := r.w.Load()
	for _, m := range []struct {
		desc  *prometheus.Desc
		v     int64
		label string
	}{
		{refusedDesc, l.RefusedBusy, contract.CodeWorkerBusy},
		{refusedDesc, l.Elsewhere, contract.CodeSessionElsewhere},
		{forwardedDesc, l.ForwardedHolder, worker.ForwardHolder},
		{forwardedDesc, l.ForwardedPlacement, worker.ForwardPlacement},
		{releasedDesc, l.ReleasedRebalance, "rebalance"},
		{releasedDesc, l.ReleasedDrain, "drain"},
	} {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.v), m.label)
	}
}
