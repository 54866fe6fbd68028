package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/talkide/platform/internal/store/postgres/pgtest"
)

// TestRun runs the benchmark small, on SQLite and PostgreSQL: every mode's
// requests succeed and stream the same bytes, and the report has every
// figure. It says nothing about the figures themselves.
func TestRun(t *testing.T) {
	for name, db := range map[string]func(t *testing.T) string{
		"sqlite":   func(*testing.T) string { return "sqlite" },
		"postgres": func(t *testing.T) string { return pgtest.BaseURL(t) },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := config{
				Databases:   []string{db(t)},
				Concurrency: []int{1, 4},
				N:           24,
				Rounds:      2,
				Warmup:      4,
				Modes:       []string{"direct", "nobudget", "nolimit", "limit"},
				RequestKiB:  2,
				ReplyWords:  30,
				GatewayLog:  true,
			}
			rep, err := run(t.Context(), cfg, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Databases) != 1 || len(rep.Databases[0].Runs) != 2 {
				t.Fatalf("report %+v", rep)
			}
			for _, r := range rep.Databases[0].Runs {
				if len(r.Modes) != 4 || len(r.Added) != 3 {
					t.Fatalf("c=%d: %d modes, %d added", r.Concurrency, len(r.Modes), len(r.Added))
				}
				direct := r.Modes[0]
				for _, m := range r.Modes {
					if m.Requests != 24 || m.Errors != 0 {
						t.Errorf("c=%d %s: %d requests, %d errors (%s)", r.Concurrency, m.Mode, m.Requests, m.Errors, m.FirstError)
					}
					if m.StreamBytes != direct.StreamBytes {
						t.Errorf("c=%d %s: %v bytes per stream, direct %v", r.Concurrency, m.Mode, m.StreamBytes, direct.StreamBytes)
					}
					if m.Total.P50 <= 0 || m.TTFB.P50 <= 0 || m.TTFB.P50 > m.Total.P50 || m.RPS <= 0 || m.Up.P50 <= 0 {
						t.Errorf("c=%d %s: figures %+v", r.Concurrency, m.Mode, m)
					}
					// The first flush falls within the handler, and the
					// client's first byte after it.
					if m.Think.P50 <= 0 || m.Think.Max > m.Stream.Max || m.FirstDown.P50 <= 0 || m.FirstDown.Max > m.TTFB.Max {
						t.Errorf("c=%d %s: think %+v, first down %+v (stream %+v, TTFB %+v)", r.Concurrency, m.Mode, m.Think, m.FirstDown, m.Stream, m.TTFB)
					}
				}
				for _, m := range r.Modes[1:] {
					if !strings.Contains(callNames(m), "RecordUsages") {
						t.Errorf("c=%d %s: store calls %v, want RecordUsages", r.Concurrency, m.Mode, m.Store)
					}
				}
				if limit := r.Modes[3]; !strings.Contains(callNames(limit), "ReserveBudget") {
					t.Errorf("c=%d limit: store calls %v, want ReserveBudget", r.Concurrency, limit.Store)
				}
			}
			var out bytes.Buffer
			rep.print(&out)
			if !strings.Contains(out.String(), "added by limit") {
				t.Errorf("the table has no added line:\n%s", out.String())
			}
			if _, err := json.Marshal(rep); err != nil {
				t.Error(err)
			}
		})
	}
}

func callNames(m modeStats) string {
	var names []string
	for _, c := range m.Store {
		names = append(names, c.Method)
	}
	return strings.Join(names, ",")
}

func TestRequestBody(t *testing.T) {
	for _, kib := range []int{4, 16, 200} {
		b := requestBody(kib, 240)
		if len(b) != kib<<10 {
			t.Errorf("%d KiB: %d bytes", kib, len(b))
		}
		var v struct {
			Model    string `json:"model"`
			Stream   bool   `json:"stream"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(b, &v); err != nil || v.Model != model || !v.Stream || len(v.Messages) != 3 {
			t.Errorf("%d KiB: %v %+v", kib, err, v)
		}
		if n := len(strings.Fields(v.Messages[2].Content)); n != 240 {
			t.Errorf("%d KiB: last message has %d words", kib, n)
		}
	}
}

// TestRunAgainstNginx runs the modes whose proxies are processes of their
// own, small: nginx (installed when missing, as root) and the talkide
// controlplane built from this tree. Every call succeeds and streams the
// same bytes, each proxy's CPU is measured, and the table against nginx
// has a row per mode. It says nothing about the figures themselves. A
// mode with -base and no second binary is refused.
func TestRunAgainstNginx(t *testing.T) {
	if _, err := exec.LookPath("nginx"); err != nil && os.Geteuid() != 0 {
		t.Skip("nginx is not installed and this process cannot install it (not root)")
	}
	cfg := smallRun(16, "direct", "nginx", "cp-nolimit", "cp-limit", "cp-limit"+baseSuffix)
	// The same build serves the -base mode, through a control-plane of
	// its own.
	bin, err := buildTalkide(t.Context(), t.TempDir(), raceFlags()...)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Talkide, cfg.TalkideBase = bin, bin
	rep, err := run(t.Context(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Databases[0].Runs[0]
	checkStreams(t, r, 16)
	for _, m := range r.Modes {
		if m.Mode != "direct" && m.ProxyCPUus <= 0 {
			t.Errorf("%s: the proxy's CPU was not measured", m.Mode)
		}
	}
	if len(r.VsNginx) != 4 {
		t.Fatalf("against nginx: %+v", r.VsNginx)
	}
	var out bytes.Buffer
	rep.print(&out)
	if !strings.Contains(out.String(), "against nginx") {
		t.Errorf("no table against nginx:\n%s", out.String())
	}

	cfg.TalkideBase = ""
	if _, err := run(t.Context(), cfg, io.Discard); err == nil || !strings.Contains(err.Error(), "-talkide-base") {
		t.Errorf("a -base mode without -talkide-base: %v", err)
	}
}

// TestRunSimApart: with the simulator in a process of its own (this
// benchmark's binary, built here: the test binary has no sim-server)
// every mode streams the whole reply through it, and the split that
// needs one clock is left out, not made up.
func TestRunSimApart(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bench-gateway")
	if err := goBuild(t.Context(), bin, ".", raceFlags()...); err != nil {
		t.Fatal(err)
	}
	cfg := smallRun(12, "direct", "limit")
	cfg.SimApart, cfg.SimBin = true, bin
	rep, err := run(t.Context(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Databases[0].Runs[0]
	checkStreams(t, r, 12)
	for _, m := range r.Modes {
		if m.TTFB.P50 <= 0 || m.Up != (pcts{}) || m.FirstDown != (pcts{}) {
			t.Errorf("%s: TTFB %+v, up %+v, first down %+v", m.Mode, m.TTFB, m.Up, m.FirstDown)
		}
	}
	var out bytes.Buffer
	rep.print(&out)
	if !strings.Contains(out.String(), "a process of its own") {
		t.Errorf("the report does not say where the simulator ran:\n%s", out.String())
	}

	t.Run("cpu-layout", func(t *testing.T) { cpuLayoutRun(t, bin) })
	t.Run("floor-whole-streams", func(t *testing.T) { floorRun(t, bin) })
}

// floorRun sends a few hundred calls of the default size through the
// floor proxy: every one streams to its end. Its server once closed a
// request's body it had not seen the end of when the answer began, under
// the transport's last read of it, which then took the upstream
// connection down mid-stream (a few calls in a hundred).
func floorRun(t *testing.T, bin string) {
	js := filepath.Join(t.TempDir(), "run.json")
	out, err := exec.CommandContext(t.Context(), bin, "-database", "sqlite", "-modes", "direct,go-floor", "-c", "1",
		"-n", "300", "-rounds", "1", "-warmup", "2", "-json", js).CombinedOutput()
	b, rerr := os.ReadFile(js)
	if rerr != nil {
		t.Fatalf("%v: %v\n%s", rerr, err, out)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	checkStreams(t, rep.Databases[0].Runs[0], 300)
}

// cpuLayoutRun runs the benchmark's binary with the simulator, then every
// proxy, on a CPU of its own: the calls stream as before and the report
// says where each part ran; a CPU this process may not use is refused
// before anything starts.
func cpuLayoutRun(t *testing.T, bin string) {
	if runtime.GOOS != "linux" {
		t.Skip("CPU affinity is set only on Linux: elsewhere the flags are refused")
	}
	args := []string{"-database", "sqlite", "-modes", "direct,go-floor", "-c", "1", "-n", "6", "-rounds", "1",
		"-warmup", "2", "-request-kib", "2", "-reply-words", "30"}
	out, err := exec.CommandContext(t.Context(), bin, append(args, "-upstream-cpu", "4096")...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "-upstream-cpu 4096: not one of the CPUs") {
		t.Errorf("-upstream-cpu 4096: %v\n%s", err, out)
	}
	allowed, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(allowed) < 2 {
		t.Skipf("this process may use %v: none is left for the client with one given away", allowed)
	}
	cpu, rest := allowed[0], allowed[1:]
	for _, tc := range []struct {
		flag                 string
		client, sim, proxies []int
	}{
		{"-upstream-cpu", rest, []int{cpu}, rest},
		{"-proxy-cpu", rest, rest, []int{cpu}},
	} {
		js := filepath.Join(t.TempDir(), "run.json")
		out, err = exec.CommandContext(t.Context(), bin, append(args, "-sim-apart", tc.flag, strconv.Itoa(cpu), "-json", js)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.flag, err, out)
		}
		if want := fmt.Sprintf("CPUs: this client on %v, the simulator on %v, every proxy on %v", tc.client, tc.sim, tc.proxies); !strings.Contains(string(out), want) {
			t.Errorf("%s: the report does not say %q:\n%s", tc.flag, want, out)
		}
		b, err := os.ReadFile(js)
		if err != nil {
			t.Fatal(err)
		}
		var rep report
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		c := rep.Config
		if !c.SimApart || !slices.Equal(c.ClientCPUs, tc.client) || !slices.Equal(c.SimCPUs, tc.sim) || !slices.Equal(c.ProxyCPUs, tc.proxies) || rep.Machine.GOMAXPROCS != len(tc.client) {
			t.Errorf("%s: config %+v, machine %+v", tc.flag, c, rep.Machine)
		}
		checkStreams(t, rep.Databases[0].Runs[0], 6)
	}
}

// smallRun is a run of n requests per mode, two at a time, on SQLite:
// enough to see every mode work, not to measure it.
func smallRun(n int, modes ...string) config {
	return config{
		Databases:   []string{"sqlite"},
		Concurrency: []int{2},
		N:           n,
		Rounds:      2,
		Warmup:      4,
		Modes:       modes,
		RequestKiB:  2,
		ReplyWords:  30,
		GatewayLog:  true,
	}
}

// checkStreams checks that every mode of r sent its n requests without an
// error and streamed as many bytes per request as the direct calls.
func checkStreams(t *testing.T, r runStats, n int) {
	t.Helper()
	direct := r.Modes[0]
	for _, m := range r.Modes {
		if m.Requests != n || m.Errors != 0 || m.StreamBytes != direct.StreamBytes || m.StreamBytes == 0 {
			t.Errorf("%s: %d requests, %d errors (%s), %v bytes per stream (direct %v)", m.Mode, m.Requests, m.Errors, m.FirstError, m.StreamBytes, direct.StreamBytes)
		}
	}
}

// raceFlags returns -race when the tests are built with it (raceEnabled),
// so that a binary a test builds reuses the packages go test compiled
// instead of compiling each dependency once more without the race
// detector (minutes on a new machine). What the test measures is then a
// race-instrumented build's, which it never compares with a goal.
func raceFlags() []string {
	if raceEnabled {
		return []string{"-race"}
	}
	return nil
}
