package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The request every call sends: a streamed /v1/messages call of a
// conversation a few turns in.
const model = "claude-sonnet-4-6"

// requestBody returns a streaming request of about kib KiB whose last user
// message has words words: the simulator echoes it, so the reply's text is
// "[simulator] messages=3 you said: " and those words, in deltas of three
// words each.
func requestBody(kib, words int) []byte {
	lorem := strings.Fields("the gateway checks the worker token reserves the budget forwards the call " +
		"streams every event back as it comes and settles what the call really cost")
	var last strings.Builder
	for i := range words {
		if i > 0 {
			last.WriteByte(' ')
		}
		last.WriteString(lorem[i%len(lorem)])
	}
	build := func(system string) []byte {
		return fmt.Appendf(nil, `{"model":%q,"max_tokens":8192,"stream":true,"system":%q,`+
			`"messages":[{"role":"user","content":"Read main.go and tell me what it does."},`+
			`{"role":"assistant","content":"It starts the control-plane: it parses flags, opens the store and serves the API."},`+
			`{"role":"user","content":%q}]}`, model, system, last.String())
	}
	pad := kib<<10 - len(build(""))
	sentence := "You are Mara, a coding agent working in the user's repository. "
	system := ""
	if pad > 0 {
		system = strings.Repeat(sentence, pad/len(sentence)+1)[:pad]
	}
	return build(system)
}

// streamEnd is how every complete stream ends.
var streamEnd = []byte(`data: {"type":"message_stop"}` + "\n\n")

// mode is one way to call the model: straight to the simulator, or through
// the gateway (without a budget service, or with one as a user without or
// with a limit).
type mode struct {
	key    string // direct, nobudget, nolimit, limit
	name   string // what it is, for the report
	url    string
	header func() http.Header
	// flush waits until the gateway's background writes (usage records,
	// settlements) are done: a phase through the gateway ends when its
	// calls are fully recorded and charged.
	flush func(context.Context) error
	// proc, when set, returns the processes of a proxy that runs apart
	// (procs.go), whose CPU the phase measures.
	proc func() []int
}

// directHeader is what a client calling the simulator directly sends.
func directHeader() http.Header {
	return http.Header{
		"X-Api-Key":         {apiKey},
		"Anthropic-Version": {"2023-06-01"},
		"Content-Type":      {"application/json"},
	}
}

var modeNames = map[string]string{
	"direct":     "direct to the simulator",
	"nginx":      "nginx (Debian nginx-light) as a pure reverse proxy, a process of its own",
	"cp-nolimit": "the talkide controlplane process (production defaults), user without limit",
	"cp-limit":   "the talkide controlplane process (production defaults), user with a limit",
	"go-floor":   "a bare Go proxy (net/http's server, httputil.ReverseProxy; no gateway work), a process of its own",
	"nobudget":   "gateway without a budget service",
	"nolimit":    "gateway, user without limit",
	"limit":      "gateway, user with a limit",
}

// before is the suffix of a mode through a gateway configured as before
// the changes this benchmark led to.
const before = "-before"

// describeMode says what a mode is.
func describeMode(k string) string {
	if name, ok := strings.CutSuffix(k, baseSuffix); ok && procModes[k] {
		return modeNames[name] + ", the -talkide-base binary"
	}
	if base, ok := strings.CutSuffix(k, before); ok && base != "direct" && modeNames[base] != "" {
		return modeNames[base] + ", as before: no conversation cache, 2 idle upstream connections"
	}
	return modeNames[k]
}

// modes returns the modes keys names, on s.
func (s *stack) modes(keys []string) ([]*mode, error) {
	var ms []*mode
	for _, k := range keys {
		m := &mode{key: k, name: describeMode(k)}
		base, old := strings.CutSuffix(k, before)
		variant := func(v string) string {
			if old {
				v += before
			}
			return v
		}
		switch {
		case k == "direct":
			m.url = s.simURL + "/v1/messages"
			m.header = directHeader
		case procModes[k]:
			if s.procs == nil {
				return nil, fmt.Errorf("mode %s: the processes did not start", k)
			}
			if err := s.procs.mode(m, k); err != nil {
				return nil, err
			}
		case base == "nobudget" || base == "nolimit" || base == "limit":
			user := freeUser
			if base == "limit" {
				user = limitedUser
			}
			if base == "nobudget" {
				gw := s.gws[variant("nobudget")]
				m.url = s.gateways[variant("nobudget")] + "/v1/messages"
				m.flush = gw.Flush
			} else {
				gw := s.gws[variant("budget")]
				m.url = s.gateways[variant("budget")] + "/v1/messages"
				m.flush = func(ctx context.Context) error { return errors.Join(gw.Flush(ctx), s.svc.Flush(ctx)) }
			}
			m.header = func() http.Header {
				return http.Header{
					"X-Worker-Token":    {s.token(user)},
					"Anthropic-Version": {"2023-06-01"},
					"Content-Type":      {"application/json"},
				}
			}
		default:
			return nil, fmt.Errorf("unknown mode %q: want direct, nginx, cp-nolimit, cp-limit (either also with %s), go-floor, nobudget, nolimit or limit, the last three optionally with %s", k, baseSuffix, before)
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// newClient is the load generator's client: HTTP/1.1 with keep-alive and
// an idle pool big enough that every stream keeps its connection to each
// server (the simulator and every gateway) across phases.
func newClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns:        0, // no limit across hosts
		MaxIdleConnsPerHost: 2 * conns,
		IdleConnTimeout:     10 * time.Minute,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}}
}

// timing is one request's.
type timing struct {
	total, ttfb time.Duration
	start, end  int64 // on the benchmark's clock (sinceEpoch)
}

// phaseResult is what one phase of one mode measured.
type phaseResult struct {
	timings  []timing
	errs     int
	firstErr error
	streamed int64         // bytes of the responses, summed
	elapsed  time.Duration // from the first request to the last response, and the background writes done
	flush    time.Duration // of elapsed: waiting for usage records and settlements after the last response
	before   counters
	after    counters
	// Where the time went (trace.go), per request.
	up, stream, down []time.Duration
	// Of the time to the first byte: the simulator's own part (its
	// handler's start to its first flush of body bytes) and the first
	// event's way down (that flush to the client's first body byte).
	think, firstDown []time.Duration
	calls            map[string][]time.Duration // store calls, by method
	newConns         int64                      // connections the simulator accepted
	proxyCPU         time.Duration              // the proxy process's CPU, when it runs apart
}

// load runs phases of requests.
type load struct {
	client *http.Client
	body   []byte
	pg     *pgServer // nil: the database's CPU is in this process, or unknown
	trace  *tracer
	// stagger spreads the first requests of a phase's clients over this
	// long (the length of a paced stream); 0: they all start at once.
	stagger time.Duration
	// limit bounds a phase's time: requests still running then are cut
	// and count as errors, and no more start.
	limit time.Duration
}

// phase sends n requests of m from c concurrent clients, each sending its
// next request as soon as its last response has ended (a closed loop).
func (l *load) phase(ctx context.Context, m *mode, c, n int) *phaseResult {
	res := &phaseResult{timings: make([]timing, n)}
	if l.limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.limit)
		defer cancel()
	}
	runtime.GC() // every phase starts from a collected heap
	var (
		next    atomic.Int64
		mu      sync.Mutex // guards res.errs, res.firstErr
		wg      sync.WaitGroup
		written atomic.Int64
	)
	l.trace.reset(n)
	conns := l.trace.conns.Load()
	var proxyBefore map[int]int64
	if m.proc != nil {
		proxyBefore = quiesce(m.proc)
	}
	res.before = sample(l.pg)
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 32<<10)
			// Streams that last a while start spread over one stream's
			// length, as independent users' would, not all at once.
			if l.stagger > 0 {
				t := time.NewTimer(l.stagger * time.Duration(w) / time.Duration(c))
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
				}
			}
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t, nb, err := l.call(ctx, m, i, buf)
				if err != nil {
					mu.Lock()
					res.errs++
					if res.firstErr == nil {
						res.firstErr = err
					}
					mu.Unlock()
					t = timing{}
				}
				res.timings[i] = t
				written.Add(nb)
			}
		}()
	}
	wg.Wait()
	if m.flush != nil {
		f := time.Now()
		fctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		if err := m.flush(fctx); err != nil && res.firstErr == nil {
			res.firstErr = fmt.Errorf("usage records or settlements not written: %w", err)
			res.errs++
		}
		cancel()
		res.flush = time.Since(f)
	}
	res.after = sample(l.pg)
	if m.proc != nil {
		res.proxyCPU = taskDelta(proxyBefore, quiesce(m.proc))
	}
	res.elapsed = res.after.wall.Sub(res.before.wall)
	res.streamed = written.Load()
	res.newConns = l.trace.conns.Load() - conns
	res.calls = l.trace.takeCalls()
	// Failed requests, and those the context cut short, are not counted.
	lg := l.trace.legs.Load()
	kept := res.timings[:0]
	for i, t := range res.timings {
		if t.total <= 0 {
			continue
		}
		kept = append(kept, t)
		if s, e := lg.start[i].Load(), lg.end[i].Load(); s > 0 && e > 0 {
			res.up = append(res.up, time.Duration(s-t.start))
			res.stream = append(res.stream, time.Duration(e-s))
			res.down = append(res.down, time.Duration(t.end-e))
			if f := lg.first[i].Load(); f > 0 {
				res.think = append(res.think, time.Duration(f-s))
				res.firstDown = append(res.firstDown, time.Duration(t.start+int64(t.ttfb)-f))
			}
		}
	}
	res.timings = kept
	return res
}

// call sends one request and reads its stream to the end.
func (l *load) call(ctx context.Context, m *mode, seq int, buf []byte) (timing, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.url, bytes.NewReader(l.body))
	if err != nil {
		return timing{}, 0, err
	}
	req.Header = m.header()
	req.Header.Set(seqHeader, strconv.Itoa(seq))
	var t timing
	t.start = sinceEpoch()
	start := time.Now()
	resp, err := l.client.Do(req)
	if err != nil {
		return timing{}, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return timing{}, 0, fmt.Errorf("%s: status %d: %s", m.key, resp.StatusCode, b)
	}
	var (
		n    int64
		tail = make([]byte, 0, 2*len(streamEnd))
	)
	for {
		k, err := resp.Body.Read(buf)
		if k > 0 {
			if n == 0 {
				t.ttfb = time.Since(start)
			}
			n += int64(k)
			tail = append(tail, buf[max(0, k-len(streamEnd)):k]...)
			tail = tail[max(0, len(tail)-len(streamEnd)):]
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return timing{}, n, fmt.Errorf("%s: reading the stream: %w", m.key, err)
		}
	}
	t.total = time.Since(start)
	t.end = sinceEpoch()
	if !bytes.Equal(tail, streamEnd) {
		return timing{}, n, fmt.Errorf("%s: the stream did not end with message_stop (%d bytes)", m.key, n)
	}
	return t, n, nil
}

// profile runs one more phase of m under the CPU profiler, into dir; its
// requests are not counted.
func (l *load) profile(ctx context.Context, dir, name string, m *mode, c, n int) error {
	f, err := os.Create(filepath.Join(dir, name+".cpu.pprof"))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	res := l.phase(ctx, m, c, n)
	pprof.StopCPUProfile()
	if res.firstErr != nil {
		return res.firstErr
	}
	return f.Close()
}
