package sandbox_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/talkide/platform/internal/sandbox"
)

// BenchmarkCommand measures what the sandbox adds to starting a command:
// /bin/true run bare (mode none), in the first layer, and in both, one of
// each per iteration so that the three are measured in the same
// conditions. It reports each one's p50 and p99, and the p50 added over
// bare.
//
// The helper is the talkide binary, built for the run: its start-up, not
// the test binary's, is what a worker pays.
//
//	go test -run XXX -bench Command -benchtime 300x ./internal/sandbox/
func BenchmarkCommand(b *testing.B) {
	helper := filepath.Join(b.TempDir(), "talkide")
	if out, err := exec.Command("go", "build", "-o", helper, "../../cmd/talkide").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	type mode struct {
		name string
		s    *sandbox.Sandbox
		d    []time.Duration
	}
	var modes []*mode
	for _, o := range []struct {
		name string
		opts sandbox.Options
	}{
		{"bare", sandbox.Options{Mode: sandbox.ModeNone}},
		{"landlock", sandbox.Options{Mode: sandbox.ModeLandlock}},
		{"namespaces", sandbox.Options{Mode: sandbox.ModeAuto}},
	} {
		o.opts.Helper = helper
		s, err := sandbox.New(&o.opts)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		if o.name == "namespaces" && !s.Namespaces() {
			b.Fatalf("no user namespaces here: %v", s.Layers())
		}
		modes = append(modes, &mode{name: o.name, s: s})
	}
	ws := b.TempDir()
	ctx := context.Background()
	for b.Loop() {
		for _, m := range modes {
			c, err := m.s.Command(sandbox.Policy{Path: "/bin/true", Workspace: ws, Env: []string{"PATH=/usr/bin:/bin"}})
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if _, err := c.Run(ctx); err != nil {
				b.Fatal(err)
			}
			m.d = append(m.d, time.Since(start))
		}
	}
	pct := func(d []time.Duration, p float64) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[min(len(s)-1, int(float64(len(s))*p))].Microseconds()) / 1000
	}
	bare := pct(modes[0].d, 0.5)
	for _, m := range modes {
		b.ReportMetric(pct(m.d, 0.5), m.name+"-p50-ms")
		b.ReportMetric(pct(m.d, 0.99), m.name+"-p99-ms")
		if m.name != "bare" {
			b.ReportMetric(pct(m.d, 0.5)-bare, m.name+"-added-p50-ms")
		}
	}
	b.ReportMetric(0, "ns/op") // the per-mode figures above are the result
}
