package sandbox

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSetCPU: the weight and ceiling a command's cpu group gets, in
// either version's files (in a plain directory here, where the kernel
// would check nothing): a fraction of a CPU, the kernel's smallest
// quota for less, and no ceiling for none, a negative number, NaN or
// infinity.
func TestSetCPU(t *testing.T) {
	for name, tc := range map[string]struct {
		cpus   float64
		v1, v2 string
	}{
		"none":          {cpus: 0, v1: "-1", v2: "max 100000"},
		"one and half":  {cpus: 1.5, v1: "150000", v2: "150000 100000"},
		"a thousandth":  {cpus: 0.0001, v1: "1000", v2: "1000 100000"},
		"negative":      {cpus: -2, v1: "-1", v2: "max 100000"},
		"NaN":           {cpus: math.NaN(), v1: "-1", v2: "max 100000"},
		"infinity":      {cpus: math.Inf(1), v1: "-1", v2: "max 100000"},
		"beyond any VM": {cpus: 1e12, v1: "-1", v2: "max 100000"},
	} {
		t.Run(name, func(t *testing.T) {
			read := func(dir, file string) string {
				b, err := os.ReadFile(filepath.Join(dir, file))
				if err != nil {
					t.Fatal(err)
				}
				return strings.TrimSpace(string(b))
			}
			// The kernel's files, there already as in a group.
			group := func(files ...string) string {
				dir := t.TempDir()
				for _, f := range files {
					if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				return dir
			}
			// Each version's weight file and ceiling file, and what they
			// should hold.
			for _, v := range []struct {
				name, weightFile, weight, ceilingFile, ceiling string
				v2                                             bool
			}{
				{"v1", "cpu.shares", "1024", "cpu.cfs_quota_us", tc.v1, false},
				{"v2", "cpu.weight", "100", "cpu.max", tc.v2, true},
			} {
				dir := group(v.weightFile, v.ceilingFile)
				if err := setCPU(dir, v.v2, tc.cpus); err != nil {
					t.Fatal(err)
				}
				if got := read(dir, v.weightFile); got != v.weight {
					t.Errorf("%s %s %s, want %s", v.name, v.weightFile, got, v.weight)
				}
				if got := read(dir, v.ceilingFile); got != v.ceiling {
					t.Errorf("%s %s %s, want %s", v.name, v.ceilingFile, got, v.ceiling)
				}
			}
		})
	}
}
