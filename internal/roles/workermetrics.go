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
	reg.MustRegister(refusals{w})
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)})
}

// refusals exports the refused commands by their code, from one reading
// of the worker's load.
type refusals struct{ w *worker.Worker }

var refusedDesc = prometheus.NewDesc("talkide_worker_commands_refused_total",
	"Commands this replica refused before doing anything, by code: worker_busy (its bound on running turns reached) or session_elsewhere (another replica holds the conversation).",
	[]string{"code"}, nil)

func (r refusals) Describe(ch chan<- *prometheus.Desc) { ch <- refusedDesc }

func (r refusals) Collect(ch chan<- prometheus.Metric) {
	l := r.w.Load()
	ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.CounterValue, float64(l.RefusedBusy), contract.CodeWorkerBusy)
	ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.CounterValue, float64(l.Elsewhere), contract.CodeSessionElsewhere)
}
