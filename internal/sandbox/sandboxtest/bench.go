package sandboxtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// SmallHelper builds cmd/talkide-sandbox static (CGO_ENABLED=0), as
// deploy/Dockerfile builds it, into a temporary directory of b's, and
// returns its path. The caller's package must lie two levels below the
// module's root, as internal/sandbox and internal/tools do.
func SmallHelper(b testing.TB) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "talkide-sandbox")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/talkide-sandbox")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build talkide-sandbox: %v\n%s", err, out)
	}
	return bin
}

// Timings are what a benchmark measured of one way of running a command:
// its wall times and, where it knows them, its CPU times.
type Timings struct {
	Name      string
	Wall, CPU []time.Duration
}

// Report reports, in milliseconds, each row's p50 and p99 wall time, its
// p50 CPU time where it has any, and, for every row after the first (the
// bare one), its p50 added over the first's and the ratio of the two.
func Report(b *testing.B, rows []*Timings) {
	bare := percentile(rows[0].Wall, 0.5)
	for _, r := range rows {
		p50 := percentile(r.Wall, 0.5)
		b.ReportMetric(p50, r.Name+"-p50-ms")
		b.ReportMetric(percentile(r.Wall, 0.99), r.Name+"-p99-ms")
		if len(r.CPU) > 0 {
			b.ReportMetric(percentile(r.CPU, 0.5), r.Name+"-cpu-p50-ms")
		}
		if r != rows[0] {
			b.ReportMetric(p50-bare, r.Name+"-added-p50-ms")
			b.ReportMetric(p50/bare, r.Name+"-x-bare")
		}
	}
	b.ReportMetric(0, "ns/op") // the per-row figures above are the result
}

// percentile is d's p-th percentile by rank, in milliseconds.
func percentile(d []time.Duration, p float64) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(float64(len(s))*p))].Microseconds()) / 1000
}
