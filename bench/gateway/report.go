package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Goals for the latency the gateway adds.
const (
	goalP50 = 300 * time.Microsecond
	goalP99 = 2 * time.Millisecond
)

// report is the whole run, as -json writes it.
type report struct {
	Machine   machine    `json:"machine"`
	Config    config     `json:"config"`
	Started   time.Time  `json:"started"`
	Databases []dbResult `json:"databases"`
}

type dbResult struct {
	Database string     `json:"database"` // sqlite or postgres
	Where    string     `json:"where"`
	PGPool   int        `json:"pg_pool,omitempty"` // PostgreSQL: the store's pool size
	PGCPU    bool       `json:"pg_cpu_measured"`   // the server's CPU was read from /proc
	Runs     []runStats `json:"runs"`              // one per concurrency
	// VsNginx compares the proxies that run apart, per concurrency, when
	// nginx was measured.
	Notes []string `json:"notes,omitempty"`
}

// runStats is one concurrency on one database.
type runStats struct {
	Concurrency int          `json:"concurrency"`
	Requests    int          `json:"requests_per_mode"`
	Rounds      int          `json:"rounds"`
	Modes       []modeStats  `json:"modes"`
	Added       []addedStats `json:"added"`
	VsNginx     []vsNginx    `json:"vs_nginx,omitempty"`
}

// vsNginx is a proxy that runs apart against nginx in the same run: what
// it adds to the direct calls and its own CPU, and each as a ratio to
// nginx's.
type vsNginx struct {
	Mode          string  `json:"mode"`
	TTFBP50us     float64 `json:"added_ttfb_p50_us"`
	TTFBP99us     float64 `json:"added_ttfb_p99_us"`
	CPUus         float64 `json:"cpu_us_per_request"`
	TTFBP50Ratio  float64 `json:"added_ttfb_p50_ratio"`
	TTFBP99Ratio  float64 `json:"added_ttfb_p99_ratio"`
	CPURatio      float64 `json:"cpu_ratio"`
	TTFBP50OverUs float64 `json:"added_ttfb_p50_over_nginx_us"`
}

// compareNginx fills r.VsNginx from its modes.
func (r *runStats) compareNginx() {
	var direct, nginx *modeStats
	for i := range r.Modes {
		switch r.Modes[i].Mode {
		case "direct":
			direct = &r.Modes[i]
		case "nginx":
			nginx = &r.Modes[i]
		}
	}
	if direct == nil || nginx == nil {
		return
	}
	ratio := func(a, b float64) float64 {
		if b <= 0 {
			return 0
		}
		return a / b
	}
	nP50, nP99 := nginx.TTFB.P50-direct.TTFB.P50, nginx.TTFB.P99-direct.TTFB.P99
	for _, m := range r.Modes {
		if !procModes[m.Mode] {
			continue
		}
		v := vsNginx{Mode: m.Mode, TTFBP50us: m.TTFB.P50 - direct.TTFB.P50, TTFBP99us: m.TTFB.P99 - direct.TTFB.P99, CPUus: m.ProxyCPUus}
		v.TTFBP50Ratio, v.TTFBP99Ratio, v.CPURatio = ratio(v.TTFBP50us, nP50), ratio(v.TTFBP99us, nP99), ratio(v.CPUus, nginx.ProxyCPUus)
		v.TTFBP50OverUs = v.TTFBP50us - nP50
		r.VsNginx = append(r.VsNginx, v)
	}
}

// modeStats is one mode's figures, over all its rounds. Times in
// microseconds.
type modeStats struct {
	Mode        string  `json:"mode"`
	Requests    int     `json:"requests"`
	Errors      int     `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	Total       pcts    `json:"total_us"`
	TTFB        pcts    `json:"ttfb_us"`
	RPS         float64 `json:"requests_per_second"`
	CPUus       float64 `json:"cpu_us_per_request"`                 // this process: client, simulator, gateway, SQLite
	ProxyCPUus  float64 `json:"proxy_cpu_us_per_request,omitempty"` // the proxy's own process (nginx, talkide controlplane), when it runs apart
	PGCPUus     float64 `json:"pg_cpu_us_per_request"`              // the PostgreSQL server, when measured
	Mallocs     float64 `json:"allocs_per_request"`
	AllocBytes  float64 `json:"alloc_bytes_per_request"`
	GCs         uint32  `json:"gcs"`
	GCPauseMs   float64 `json:"gc_pause_ms"`
	FlushMs     float64 `json:"settlement_wait_ms"` // for usage records and settlements after the last response of each phase, summed
	StreamBytes float64 `json:"stream_bytes_per_request"`
	// The machine while the mode ran, in percent of its CPUs' time: busy
	// in other processes than this one and the PostgreSQL server (another
	// workload disturbing the figures), and stolen by the hypervisor.
	OtherPct float64 `json:"other_processes_cpu_pct"`
	StealPct float64 `json:"steal_cpu_pct"`
	// Where the time goes (trace.go): client to the simulator's handler,
	// the handler, the handler's return to the client's EOF.
	Up     pcts `json:"up_us"`
	Stream pcts `json:"stream_us"`
	Down   pcts `json:"down_us"`
	Edges  pcts `json:"up_plus_down_us"` // per request: everything but the simulator's own time
	// Of the time to the first byte: the simulator's handler start to its
	// first flush of body bytes, and that flush to the client's first
	// body byte.
	Think     pcts        `json:"think_us"`
	FirstDown pcts        `json:"first_down_us"`
	NewConns  float64     `json:"new_upstream_conns_per_request"`
	Store     []callStats `json:"store_calls,omitempty"`
}

// callStats is one store method's calls, timed around the call (waits for
// a connection or the SQLite writer included).
type callStats struct {
	Method     string  `json:"method"`
	PerRequest float64 `json:"per_request"`
	P50us      float64 `json:"p50_us"`
	P99us      float64 `json:"p99_us"`
}

type pcts struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// addedStats is what a gateway mode adds to the direct calls: the
// difference of the two distributions' percentiles (not a per-request
// difference, which one run cannot observe).
type addedStats struct {
	Mode      string  `json:"mode"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	TTFBP50us float64 `json:"ttfb_p50_us"`
	TTFBP99us float64 `json:"ttfb_p99_us"`
	// Of up + down, the call without the simulator's own time: what the
	// gateway adds when the stream's length is noise (paced streams).
	EdgesP50us float64 `json:"up_plus_down_p50_us"`
	EdgesP99us float64 `json:"up_plus_down_p99_us"`
	CPUus      float64 `json:"cpu_us_per_request"`
	PGCPUus    float64 `json:"pg_cpu_us_per_request"`
	Mallocs    float64 `json:"allocs_per_request"`
	AllocBytes float64 `json:"alloc_bytes_per_request"`
	GoalMet    bool    `json:"goal_met"` // p50 < 0.3 ms and p99 < 2 ms
}

// summarize turns a mode's phases into its figures.
func summarize(key string, phases []*phaseResult) modeStats {
	ms := modeStats{Mode: key}
	var (
		ups, streams  []time.Duration
		downs, edges  []time.Duration
		thinks        []time.Duration
		firstDowns    []time.Duration
		calls         = map[string][]time.Duration{}
		conns         int64
		totals, ttfbs []time.Duration
		elapsed       time.Duration
		cpu, pgcpu    time.Duration
		mallocs, by   uint64
		pause         uint64
		busy, steal   time.Duration
		streamed      int64
		proxy         time.Duration
	)
	for _, p := range phases {
		for _, t := range p.timings {
			totals = append(totals, t.total)
			ttfbs = append(ttfbs, t.ttfb)
		}
		ms.Errors += p.errs
		if p.firstErr != nil && ms.FirstError == "" {
			ms.FirstError = p.firstErr.Error()
		}
		elapsed += p.elapsed
		ms.FlushMs += ms3(p.flush)
		cpu += p.after.cpu - p.before.cpu
		pgcpu += pgDelta(p.before.serverPG, p.after.serverPG)
		busy += p.after.machineBusy - p.before.machineBusy
		steal += p.after.machineSteal - p.before.machineSteal
		mallocs += p.after.mallocs - p.before.mallocs
		by += p.after.bytes - p.before.bytes
		ms.GCs += p.after.numGC - p.before.numGC
		pause += p.after.pauseNs - p.before.pauseNs
		streamed += p.streamed
		ups = append(ups, p.up...)
		streams = append(streams, p.stream...)
		downs = append(downs, p.down...)
		thinks = append(thinks, p.think...)
		firstDowns = append(firstDowns, p.firstDown...)
		for i := range p.up {
			edges = append(edges, p.up[i]+p.down[i])
		}
		for k, v := range p.calls {
			calls[k] = append(calls[k], v...)
		}
		conns += p.newConns
		proxy += p.proxyCPU
	}
	n := len(totals)
	ms.Requests = n
	if n == 0 {
		return ms
	}
	ms.Total, ms.TTFB = percentiles(totals), percentiles(ttfbs)
	ms.RPS = float64(n) / elapsed.Seconds()
	ms.CPUus = us(cpu) / float64(n)
	ms.ProxyCPUus = us(proxy) / float64(n)
	ms.PGCPUus = us(pgcpu) / float64(n)
	ms.Mallocs = float64(mallocs) / float64(n)
	ms.AllocBytes = float64(by) / float64(n)
	ms.GCPauseMs = float64(pause) / 1e6
	ms.StreamBytes = float64(streamed) / float64(n)
	ms.NewConns = float64(conns) / float64(n)
	if capacity := float64(elapsed) * float64(runtime.NumCPU()); capacity > 0 {
		ms.OtherPct = max(0, 100*float64(busy-cpu-pgcpu)/capacity)
		ms.StealPct = 100 * float64(steal) / capacity
	}
	if len(ups) > 0 {
		ms.Up, ms.Stream, ms.Down = percentiles(ups), percentiles(streams), percentiles(downs)
		ms.Edges = percentiles(edges)
	}
	if len(thinks) > 0 {
		ms.Think, ms.FirstDown = percentiles(thinks), percentiles(firstDowns)
	}
	for _, k := range slices.Sorted(maps.Keys(calls)) {
		p := percentiles(calls[k])
		ms.Store = append(ms.Store, callStats{Method: k, PerRequest: float64(len(calls[k])) / float64(n), P50us: p.P50, P99us: p.P99})
	}
	return ms
}

func added(direct, gw modeStats) addedStats {
	a := addedStats{
		Mode:       gw.Mode,
		P50us:      gw.Total.P50 - direct.Total.P50,
		P99us:      gw.Total.P99 - direct.Total.P99,
		TTFBP50us:  gw.TTFB.P50 - direct.TTFB.P50,
		TTFBP99us:  gw.TTFB.P99 - direct.TTFB.P99,
		EdgesP50us: gw.Edges.P50 - direct.Edges.P50,
		EdgesP99us: gw.Edges.P99 - direct.Edges.P99,
		CPUus:      gw.CPUus - direct.CPUus,
		PGCPUus:    gw.PGCPUus - direct.PGCPUus,
		Mallocs:    gw.Mallocs - direct.Mallocs,
		AllocBytes: gw.AllocBytes - direct.AllocBytes,
	}
	a.GoalMet = a.P50us < us(goalP50) && a.P99us < us(goalP99)
	return a
}

// percentiles by nearest rank, in microseconds.
func percentiles(ds []time.Duration) pcts {
	slices.Sort(ds)
	at := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(ds)))) - 1
		return us(ds[min(max(i, 0), len(ds)-1)])
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return pcts{P50: at(0.50), P90: at(0.90), P99: at(0.99), P999: at(0.999), Max: us(ds[len(ds)-1]),
		Mean: us(sum) / float64(len(ds))}
}

func us(d time.Duration) float64  { return float64(d) / float64(time.Microsecond) }
func ms3(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ms formats microseconds as milliseconds.
func ms(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100_000:
		return fmt.Sprintf("%.0f ms", v/1000)
	case a >= 10_000:
		return fmt.Sprintf("%.1f ms", v/1000)
	default:
		return fmt.Sprintf("%.3f ms", v/1000)
	}
}

func signed(s string, v float64) string {
	if v >= 0 {
		return "+" + s
	}
	return s
}

// print writes a database's tables.
func (d dbResult) print(w io.Writer) {
	fmt.Fprintf(w, "\n== %s (%s)", d.Database, d.Where)
	if d.PGPool > 0 {
		fmt.Fprintf(w, ", pool of %d connections", d.PGPool)
	}
	fmt.Fprintln(w)
	for _, r := range d.Runs {
		fmt.Fprintf(w, "\n-- %d concurrent stream(s), %d requests per mode in %d rounds\n", r.Concurrency, r.Requests, r.Rounds)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "mode\tp50\tp99\tp99.9\tTTFB p50\tTTFB p99\treq/s\tCPU/req\tDB CPU/req\tallocs/req\tKB alloc/req\tGCs\tsettle wait\tother load\terrors\t")
		for _, m := range r.Modes {
			db := "-"
			if d.PGCPU {
				db = fmt.Sprintf("%.0f µs", m.PGCPUus)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.0f µs\t%s\t%.0f\t%.1f\t%d\t%.0f ms\t%.0f%%\t%d\t\n",
				m.Mode, ms(m.Total.P50), ms(m.Total.P99), ms(m.Total.P999), ms(m.TTFB.P50), ms(m.TTFB.P99),
				m.RPS, m.CPUus, db, m.Mallocs, m.AllocBytes/1000, m.GCs, m.FlushMs, m.OtherPct+m.StealPct, m.Errors)
		}
		for _, a := range r.Added {
			db := "-"
			if d.PGCPU {
				db = fmt.Sprintf("%+.0f µs", a.PGCPUus)
			}
			fmt.Fprintf(tw, "added by %s\t%s\t%s\t\t%s\t%s\t\t%+.0f µs\t%s\t%+.0f\t%+.1f\t\t\t\t\t\n",
				a.Mode, signed(ms(a.P50us), a.P50us), signed(ms(a.P99us), a.P99us),
				signed(ms(a.TTFBP50us), a.TTFBP50us), signed(ms(a.TTFBP99us), a.TTFBP99us),
				a.CPUus, db, a.Mallocs, a.AllocBytes/1000)
		}
		tw.Flush()
		fmt.Fprintln(w, "   where the time goes: up = client to the simulator's handler, stream = the handler, down = its return to the client's EOF; of the time to the first byte, think = the handler to its first flush of body bytes, first down = that flush to the client's first body byte")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "mode\tup p50\tup p99\tstream p50\tstream p99\tdown p50\tdown p99\tup+down p50\tup+down p99\tthink p50\tfirst down p50\tfirst down p99\tnew upstream conns/req\tstore calls (per request: p50 / p99)\t")
		// The split needs the simulator's clock: with the simulator apart
		// (and its connection count) it was not measured, and says so.
		split := map[string]bool{}
		for _, m := range r.Modes {
			split[m.Mode] = m.Up != (pcts{})
			var calls []string
			for _, c := range m.Store {
				calls = append(calls, fmt.Sprintf("%s ×%.2f: %s / %s", c.Method, c.PerRequest, ms(c.P50us), ms(c.P99us)))
			}
			cells := []string{ms(m.Up.P50), ms(m.Up.P99), ms(m.Stream.P50), ms(m.Stream.P99), ms(m.Down.P50), ms(m.Down.P99),
				ms(m.Edges.P50), ms(m.Edges.P99), ms(m.Think.P50), ms(m.FirstDown.P50), ms(m.FirstDown.P99), fmt.Sprintf("%.3f", m.NewConns)}
			if !split[m.Mode] {
				for i := range cells {
					cells[i] = "-"
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t\n", m.Mode, strings.Join(cells, "\t"), strings.Join(calls, "; "))
		}
		for _, a := range r.Added {
			if split[a.Mode] {
				fmt.Fprintf(tw, "added by %s\t\t\t\t\t\t\t%s\t%s\t\t\t\t\t\t\n", a.Mode, signed(ms(a.EdgesP50us), a.EdgesP50us), signed(ms(a.EdgesP99us), a.EdgesP99us))
			}
		}
		tw.Flush()
		for _, m := range r.Modes {
			if m.FirstError != "" {
				fmt.Fprintf(w, "   %s: first error: %s\n", m.Mode, m.FirstError)
			}
		}
		for _, a := range r.Added {
			verdict := "MET"
			if !a.GoalMet {
				verdict = "MISSED"
			}
			fmt.Fprintf(w, "   goal (added p50 < 0.3 ms, p99 < 2 ms), %s: %s\n", a.Mode, verdict)
		}
	}
	for _, r := range d.Runs {
		if len(r.VsNginx) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n-- against nginx, %d concurrent stream(s): each proxy a process of its own, its CPU from /proc\n", r.Concurrency)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "mode\tadded TTFB p50\tadded TTFB p99\tCPU/req\tTTFB p50 ×nginx\tTTFB p99 ×nginx\tCPU ×nginx\tTTFB p50 over nginx\t")
		for _, v := range r.VsNginx {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.3f ms\t%.2f\t%.2f\t%.2f\t%s\t\n", v.Mode,
				signed(ms(v.TTFBP50us), v.TTFBP50us), signed(ms(v.TTFBP99us), v.TTFBP99us), v.CPUus/1000,
				v.TTFBP50Ratio, v.TTFBP99Ratio, v.CPURatio, signed(ms(v.TTFBP50OverUs), v.TTFBP50OverUs))
		}
		tw.Flush()
	}
	for _, n := range d.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "gateway overhead benchmark, %s\n", r.Started.Format(time.RFC3339))
	fmt.Fprintf(w, "machine: %s\n", r.Machine)
	fmt.Fprintf(w, "request: %d bytes, streamed; reply: %d words of text in deltas of 3; delay per delta %v\n",
		r.Config.RequestBytes, r.Config.ReplyWords, r.Config.DeltaDelay)
	if r.Config.SimApart {
		fmt.Fprintln(w, "simulator: a process of its own (-sim-apart): up, think and down are not measured")
	}
	if r.Config.ClientCPUs != nil {
		fmt.Fprintf(w, "CPUs: this client on %v, the simulator on %v, every proxy on %v\n", r.Config.ClientCPUs, r.Config.SimCPUs, r.Config.ProxyCPUs)
	}
	for _, k := range r.Config.Modes {
		fmt.Fprintf(w, "mode %s: %s\n", k, describeMode(k))
	}
	for _, d := range r.Databases {
		d.print(w)
	}
}
