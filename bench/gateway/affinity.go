package main

import (
	"fmt"
	"slices"
)

// With -upstream-cpu the simulator gets a CPU to itself and everything
// else of the run (the client in this process, nginx, the floor proxies,
// the control-planes) the machine's other CPUs. In production the model's
// servers are other machines: they never take a CPU from the gateway. On a
// machine this small, a simulator beside the proxy does. A serial call's
// simulator writes its first event and goes on writing the rest for a few
// hundred microseconds, busy on one CPU; whether the proxy then forwards
// that first event at once or only after the simulator is done depends on
// which CPU the kernel wakes the proxy's thread on, and that differs from
// one program to the next (docs/benchmarks.md measured it). The layout
// takes that placement out of the comparison: every proxy runs in the
// same layout in the same rounds.

// cpuSplit is the layout: the simulator's CPU, and the rest's.
type cpuSplit struct {
	upstream int
	rest     []int
}

// splitCPUs returns the layout with upstream for the simulator and the
// rest of allowed (the CPUs this process may run on) for everything else.
func splitCPUs(allowed []int, upstream int) (cpuSplit, error) {
	if !slices.Contains(allowed, upstream) {
		return cpuSplit{}, fmt.Errorf("-upstream-cpu %d: not one of the CPUs this process may use (%v)", upstream, allowed)
	}
	var rest []int
	for _, c := range allowed {
		if c != upstream {
			rest = append(rest, c)
		}
	}
	if len(rest) == 0 {
		return cpuSplit{}, fmt.Errorf("-upstream-cpu %d: it is the only CPU this process may use, none would be left for the proxies", upstream)
	}
	return cpuSplit{upstream: upstream, rest: rest}, nil
}
