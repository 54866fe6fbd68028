package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/worker"
)

// rssBytes is this process's resident set size.
func rssBytes(t testing.TB) float64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if f := bytes.Fields(line); len(f) >= 2 && string(f[0]) == "VmRSS:" {
			kb, _ := strconv.ParseFloat(string(f[1]), 64)
			return kb * 1024
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// parallel runs fn(i) for i in [0, n), 32 at a time. t.Fatal in fn ends
// only the goroutine it runs on (errgroup still frees its place), so no
// more are started once t has failed, and t fails once the others are
// done.
func parallel(t testing.TB, n int, fn func(i int)) {
	var g errgroup.Group
	g.SetLimit(32)
	for i := 0; i < n && !t.Failed(); i++ {
		g.Go(func() error { fn(i); return nil })
	}
	g.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// BenchmarkSessionMemory measures, with the whole platform in this process
// (control-plane, worker with the native harness, simulator), the resident
// memory each idle session and each active session (a turn waiting on a
// slow model reply) adds, and the CPU time per turn, at 1, 100 and 1,000
// sessions. Run with -benchtime=1x. The worker runs with no bound on the
// turns it runs at once, as --max-running-turns -1 gives: its default on
// two processors (64) would refuse most of the turns this holds open.
func BenchmarkSessionMemory(b *testing.B) {
	// Each of parallel's 32 calls at a time keeps its connection for the
	// next (Go keeps 2 idle ones a host by default). Set here, where no
	// test runs beside: a test's goroutines may use the transport.
	http.DefaultTransport.(*http.Transport).MaxIdleConnsPerHost = 64
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			for b.Loop() {
				measureSessions(b, n, b.ReportMetric)
			}
		})
	}
}

// TestSessionsBeyondTheTurnBound runs BenchmarkSessionMemory's
// measurement once, small but with more turns held open at once than a
// worker's default bound allows on this machine's processors (a
// benchmark is not run by go test, and this one once waited for ever
// when the bound came): every turn runs at the same time and ends, and
// every figure is reported.
func TestSessionsBeyondTheTurnBound(t *testing.T) {
	n := min(worker.TurnsPerCPU*runtime.GOMAXPROCS(0)+6, 200)
	got := map[string]float64{}
	measureSessions(t, n, func(v float64, unit string) { got[unit] = v })
	for _, unit := range []string{"MiB/idle-session", "MiB/active-session", "ms-CPU/turn", "MiB-RSS-total"} {
		if v, ok := got[unit]; !ok || math.IsNaN(v) || math.IsInf(v, 0) {
			t.Errorf("%s: %v (reported: %t)", unit, v, ok)
		}
	}
	if got["MiB/active-session"] <= 0 || got["ms-CPU/turn"] <= 0 {
		t.Errorf("%d turns held open added no memory or took no CPU: %v", n, got)
	}
}

// measureSessions starts the platform, holds n turns open at once and
// reports what they cost through report (testing.B's ReportMetric in the
// benchmark).
func measureSessions(t testing.TB, n int, report func(v float64, unit string)) {
	st, err := roles.StartDev(context.Background(), roles.DevConfig{DataDir: t.TempDir(), Addr: "127.0.0.1:0", Agent: roles.AgentConfig{MaxRunningTurns: -1}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		st.Stop(ctx)
	}()
	base := st.Info.ControlPlane
	// live is the memory Go holds for live objects and stacks: unlike RSS
	// it goes down when memory is freed, so deltas between sub-benchmarks
	// in one process stay meaningful.
	live := func() float64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return float64(ms.HeapInuse + ms.StackInuse)
	}
	before := live()

	ids := make([]string, n)
	parallel(t, n, func(i int) { ids[i] = createConversation(t, base).ID })
	idle := live()

	// One turn each, every model reply held open by a slow stream.
	start := cpuTime()
	// The reply is held long enough that the first turns still run when
	// the last are sent, also on a loaded machine: 1.5 s and 5 ms a turn.
	hold := fmt.Sprintf("[[sleep:%d]] hold this turn open for a while", 1500+5*n)
	parallel(t, n, func(i int) { send(t, base, ids[i], hold) })
	deadline := time.Now().Add(60 * time.Second)
	for {
		if st.Worker.Worker.Load().RunningTurns == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not all %d turns became active", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	active := live()
	rss := rssBytes(t)
	for {
		if st.Worker.Worker.Load().RunningTurns == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("turns did not finish")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cpu := cpuTime() - start

	const mib = 1 << 20
	report((idle-before)/float64(n)/mib, "MiB/idle-session")
	report((active-before)/float64(n)/mib, "MiB/active-session")
	report(float64(cpu.Microseconds())/float64(n)/1000, "ms-CPU/turn")
	report(rss/mib, "MiB-RSS-total")
}
