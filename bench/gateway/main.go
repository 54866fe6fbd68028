// Command gateway measures what the gateway-proxy adds to a model call: a
// client streams the same request from the Anthropic simulator directly and
// through the gateway (token check, conversation lookup, budget
// reservation, SSE pass-through with usage parsing, usage record,
// settlement), at several concurrencies, on SQLite and on PostgreSQL, all
// in this one process over loopback. docs/benchmarks.md has the figures and
// says how to read them.
//
//	go run ./bench/gateway                                   # SQLite (and $TALKIDE_TEST_DATABASE_URL if set)
//	go run ./bench/gateway -database postgres://… -c 1,256 -json out.json
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/talkide/platform/internal/fdlimit"
)

// config is the run's settings (flags).
type config struct {
	Databases    []string      `json:"-"`
	Concurrency  []int         `json:"concurrency"`
	N            int           `json:"n"`      // requests per mode and concurrency; 0: auto
	Rounds       int           `json:"rounds"` // phases per mode, alternating with the other modes
	Warmup       int           `json:"warmup"` // requests per mode before measuring; 0: auto
	Modes        []string      `json:"modes"`
	RequestKiB   int           `json:"request_kib"`
	RequestBytes int           `json:"request_bytes"`
	ReplyWords   int           `json:"reply_words"`
	DeltaDelay   time.Duration `json:"delta_delay_ns"`
	GatewayLog   bool          `json:"gateway_log"`
	PhaseLimit   time.Duration `json:"phase_limit_ns"`
	ProfileDir   string        `json:"-"`
	Talkide      string        `json:"-"`
	TalkideBase  string        `json:"-"`
	// SimApart runs the simulator as a process of its own (this binary,
	// SimBin or the running one, as `bench-gateway sim-server …`) instead
	// of beside the client in this one.
	SimApart bool   `json:"sim_apart"`
	SimBin   string `json:"-"`
	// Where the parts of the run were confined (-upstream-cpu,
	// -proxy-cpu; affinity.go says why): the client (this process), the
	// simulator apart, and every proxy. All nil when nothing was; a part
	// without a CPU of its own ran on the client's.
	ClientCPUs []int `json:"client_cpus,omitempty"`
	SimCPUs    []int `json:"sim_cpus,omitempty"`
	ProxyCPUs  []int `json:"proxy_cpus,omitempty"`
	// layout is the same, with nil for a part that starts where the
	// client runs.
	layout cpuLayout
}

// requests returns how many requests each mode sends at concurrency c.
func (c config) requests(conc int) int {
	switch {
	case c.N > 0:
		return c.N
	case conc <= 16:
		return 2000
	default:
		return max(20000, 40*conc)
	}
}

func (c config) warmup(conc int) int {
	if c.Warmup > 0 {
		return c.Warmup
	}
	return max(200, 2*conc)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "floor-proxy" {
		fmt.Fprintln(os.Stderr, "floor proxy:", floorMain(os.Args[2:]))
		os.Exit(1)
	}
	if len(os.Args) > 1 && os.Args[1] == "sim-server" {
		fmt.Fprintln(os.Stderr, "simulator:", simMain(os.Args[2:]))
		os.Exit(1)
	}
	cfg := config{}
	var dbs, conc, modes, jsonOut string
	defDB := "sqlite"
	if u := os.Getenv("TALKIDE_TEST_DATABASE_URL"); strings.HasPrefix(u, "postgres") {
		defDB += "," + u
	}
	flag.StringVar(&dbs, "database", defDB, "comma-separated: sqlite (a file in a temp dir) and/or a postgres:// URL (a new schema is made and dropped); default sqlite, and $TALKIDE_TEST_DATABASE_URL when set")
	flag.StringVar(&conc, "c", "1,256", "comma-separated concurrencies: streams in flight at once")
	flag.IntVar(&cfg.N, "n", 0, "requests per mode at each concurrency; 0: 2,000 up to c=16, else max(20,000, 40×c)")
	flag.IntVar(&cfg.Rounds, "rounds", 4, "phases per mode; the modes take turns, so drift affects them alike")
	flag.IntVar(&cfg.Warmup, "warmup", 0, "warm-up requests per mode before measuring; 0: max(200, 2×c)")
	flag.StringVar(&modes, "modes", "direct,nobudget,nolimit,limit", "comma-separated modes: direct, nginx (a pure reverse proxy, its own process), go-floor (a bare Go proxy on the standard library without the gateway's work, its own process), cp-nolimit and cp-limit (the talkide controlplane process with its production defaults, a user without and with a limit; with the suffix -base, through the control-plane of -talkide-base), nobudget (a gateway without a budget service, for comparison), nolimit (gateway, user without limits), limit (gateway, user with a spending limit: a reservation in the database per call); a gateway mode with the suffix -before goes through a gateway configured as before (see -before)")
	flag.IntVar(&cfg.RequestKiB, "request-kib", 16, "request body size in KiB")
	flag.IntVar(&cfg.ReplyWords, "reply-words", 240, "words the simulator echoes back (three per delta)")
	flag.DurationVar(&cfg.DeltaDelay, "delta-delay", 0, "the simulator's pause before each delta")
	flag.BoolVar(&cfg.GatewayLog, "gateway-log", true, "the gateway logs its line per call as JSON (to io.Discard), as in production")
	var withBefore bool
	flag.BoolVar(&withBefore, "before", false, "also run each gateway mode through a gateway configured as before the changes this benchmark led to (mode-before: no conversation cache, http.DefaultTransport's 2 idle upstream connections), in the same rounds")
	flag.StringVar(&jsonOut, "json", "", "write the results as JSON to this file (- for stdout)")
	flag.StringVar(&cfg.Talkide, "talkide", "", "the talkide binary the cp-* modes run (default: go build ./cmd/talkide into a temp dir)")
	flag.StringVar(&cfg.TalkideBase, "talkide-base", "", "a second talkide binary (say, built from the tree before a change): the modes cp-nolimit-base and cp-limit-base go through its control-plane, in the same rounds as the rest")
	flag.BoolVar(&cfg.SimApart, "sim-apart", false, "run the simulator as a process of its own, not beside the client in this one (which shares its CPU time with the client's reads; without the one clock, the split of each call into up, think and down is not measured)")
	upstreamCPU, proxyCPU := -1, -1
	flag.IntVar(&upstreamCPU, "upstream-cpu", -1, "give the simulator this CPU to itself (implies -sim-apart), as a model's servers are other machines; the client, and every proxy without -proxy-cpu, run on the CPUs left; Linux only")
	flag.IntVar(&proxyCPU, "proxy-cpu", -1, "give every proxy that is a process of its own (nginx, the floor proxy, the control-planes) this CPU to itself, as a gateway has its machine to itself; the client, the in-process gateway modes, and the simulator without -upstream-cpu run on the CPUs left; Linux only")
	flag.DurationVar(&cfg.PhaseLimit, "phase-limit", 5*time.Minute, "bound on one phase's time (a mode's share of a round, or its warm-up): requests still running then are cut and count as errors")
	flag.StringVar(&cfg.ProfileDir, "profile", "", "after measuring, send -n more requests per mode under the CPU profiler and write DIR/<db>-c<c>-<mode>.cpu.pprof")
	flag.Parse()

	cfg.Databases = splitList(dbs)
	cfg.Modes = splitList(modes)
	if withBefore {
		for _, m := range cfg.Modes {
			if m != "direct" && !strings.HasSuffix(m, before) {
				cfg.Modes = append(cfg.Modes, m+before)
			}
		}
	}
	for _, s := range splitList(conc) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "-c: %q is not a positive number\n", s)
			os.Exit(2)
		}
		cfg.Concurrency = append(cfg.Concurrency, n)
	}
	if cfg.Rounds < 1 {
		fmt.Fprintln(os.Stderr, "-rounds must be at least 1")
		os.Exit(2)
	}

	if upstreamCPU != -1 || proxyCPU != -1 {
		cfg.SimApart = cfg.SimApart || upstreamCPU != -1
		if err := applyCPULayout(&cfg, upstreamCPU, proxyCPU); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}

	// Every stream holds a connection to the proxy and, through it or
	// directly, one to the simulator in this process, for each mode: at
	// 1,024 streams and four modes, some 8,000 descriptors.
	if _, err := fdlimit.Raise(); err != nil {
		fmt.Fprintln(os.Stderr, "gateway benchmark:", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, cfg, os.Stderr)
	if rep != nil {
		rep.print(os.Stdout)
		if jsonOut != "" {
			if jerr := writeJSON(jsonOut, rep); jerr != nil {
				err = errors.Join(err, jerr)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway benchmark:", err)
		os.Exit(1)
	}
}

// applyCPULayout confines this process (and so every process it starts
// without a CPU of its own) to the CPUs left by upstream and proxy (each
// -1 when not given), and notes the layout in cfg.
func applyCPULayout(cfg *config, upstream, proxy int) error {
	allowed, err := allowedCPUs()
	if err != nil {
		return err
	}
	l, err := planCPUs(allowed, upstream, proxy)
	if err != nil {
		return err
	}
	if err := confine(l.client); err != nil {
		return fmt.Errorf("confining this process to CPUs %v: %w", l.client, err)
	}
	cfg.layout = l
	cfg.ClientCPUs, cfg.SimCPUs, cfg.ProxyCPUs = l.client, l.sim, l.proxies
	if l.sim == nil {
		cfg.SimCPUs = l.client
	}
	if l.proxies == nil {
		cfg.ProxyCPUs = l.client
	}
	// The runtime would follow the smaller set within a second; the
	// warm-up should not run with more Ps than CPUs either.
	runtime.GOMAXPROCS(len(l.client))
	return nil
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func writeJSON(path string, rep *report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = os.Stdout.Write(b)
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// run measures every database at every concurrency; progress goes to logw.
// It returns what it measured even when it fails part-way, and an error
// when any request failed.
func run(ctx context.Context, cfg config, logw io.Writer) (*report, error) {
	body := requestBody(cfg.RequestKiB, cfg.ReplyWords)
	cfg.RequestBytes = len(body)
	rep := &report{Machine: describeMachine(), Config: cfg, Started: time.Now()}
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return nil, err
		}
	}
	var failed error
	for _, db := range cfg.Databases {
		d, err := runDatabase(ctx, cfg, db, body, logw)
		if d != nil {
			rep.Databases = append(rep.Databases, *d)
		}
		if err != nil {
			return rep, err
		}
		for _, r := range d.Runs {
			for _, m := range r.Modes {
				if m.Errors > 0 && failed == nil {
					failed = fmt.Errorf("%s, c=%d, %s: %d requests failed: %s", d.Database, r.Concurrency, m.Mode, m.Errors, m.FirstError)
				}
			}
		}
	}
	return rep, failed
}

func runDatabase(ctx context.Context, cfg config, db string, body []byte, logw io.Writer) (*dbResult, error) {
	tmp, err := os.MkdirTemp("", "talkide-bench-gateway-")
	if err != nil {
		return nil, err
	}
	if os.Getenv("BENCH_KEEP_TMP") == "" {
		defer os.RemoveAll(tmp)
	}
	s, err := startStack(ctx, stackConfig{database: db, deltaDelay: cfg.DeltaDelay, gatewayLog: cfg.GatewayLog, tmpDir: tmp,
		modes: cfg.Modes, talkide: cfg.Talkide, base: cfg.TalkideBase, simApart: cfg.SimApart, simBin: cfg.SimBin, simCPUs: cfg.layout.sim, proxyCPUs: cfg.layout.proxies})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := s.close(); err != nil {
			fmt.Fprintf(logw, "%s: shutting down: %v\n", s.kind, err)
		}
	}()
	modes, err := s.modes(cfg.Modes)
	if err != nil {
		return nil, err
	}
	d := &dbResult{Database: s.kind, Where: s.where, PGPool: s.pgPool}
	maxC := 1
	for _, c := range cfg.Concurrency {
		maxC = max(maxC, c)
	}
	// A paced stream lasts about its deltas' delays: the reply's words
	// in deltas of three.
	stagger := cfg.DeltaDelay * time.Duration((cfg.ReplyWords+5+2)/3)
	l := &load{client: newClient(maxC), body: body, trace: s.trace, stagger: stagger, limit: cfg.PhaseLimit}
	defer l.client.CloseIdleConnections()
	if s.kind == "postgres" {
		if l.pg = findPGServer(ctx, s.postgres); l.pg != nil {
			d.PGCPU = true
		} else {
			d.Notes = append(d.Notes, "the PostgreSQL server does not run on this machine: its CPU is not measured")
		}
	}

	for _, c := range cfg.Concurrency {
		n := cfg.requests(c)
		per := (n + cfg.Rounds - 1) / cfg.Rounds
		r := runStats{Concurrency: c, Requests: per * cfg.Rounds, Rounds: cfg.Rounds}
		fmt.Fprintf(logw, "%s c=%d: warm-up, %d requests per mode\n", s.kind, c, cfg.warmup(c))
		for _, m := range modes {
			if res := l.phase(ctx, m, c, cfg.warmup(c)); res.firstErr != nil {
				return d, fmt.Errorf("%s c=%d warm-up %s: %w", s.kind, c, m.key, res.firstErr)
			}
		}
		phases := make(map[string][]*phaseResult)
		for round := range cfg.Rounds {
			for i := range modes {
				m := modes[(i+round)%len(modes)] // a different mode goes first each round
				res := l.phase(ctx, m, c, per)
				phases[m.key] = append(phases[m.key], res)
				fmt.Fprintf(logw, "%s c=%d round %d/%d %-8s %6d requests in %v (background writes: %v), errors %d\n",
					s.kind, c, round+1, cfg.Rounds, m.key, len(res.timings), res.elapsed.Round(time.Millisecond),
					res.flush.Round(time.Millisecond), res.errs)
				if ctx.Err() != nil {
					return d, ctx.Err()
				}
			}
		}
		var direct *modeStats
		for _, m := range modes {
			st := summarize(m.key, phases[m.key])
			r.Modes = append(r.Modes, st)
			if m.key == "direct" {
				direct = &st
			}
		}
		if direct != nil {
			for _, st := range r.Modes {
				if st.Mode != "direct" {
					r.Added = append(r.Added, added(*direct, st))
				}
			}
		}
		r.compareNginx()
		d.Runs = append(d.Runs, r)

		if cfg.ProfileDir != "" {
			for _, m := range modes {
				name := fmt.Sprintf("%s-c%d-%s", s.kind, c, m.key)
				if err := l.profile(ctx, cfg.ProfileDir, name, m, c, n); err != nil {
					return d, fmt.Errorf("profile %s: %w", name, err)
				}
				fmt.Fprintf(logw, "wrote %s/%s.cpu.pprof\n", cfg.ProfileDir, name)
			}
		}
	}
	return d, nil
}
