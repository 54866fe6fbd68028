package main

import (
	"fmt"
	"slices"
)

// In production the gateway has its machine to itself: the model's
// servers and the workers that call it are other machines. On a machine
// this small, the simulator, the client and the proxy share two CPUs. A
// serial call's simulator writes its first event and goes on writing the
// rest, busy on its CPU; whoever must read that first event on the same
// CPU (a proxy, or the client) may wait until it is done, and how often
// that happened differed from one proxy to the next by more than the
// gateway's whole work costs (bench/gateway measured it).
// -upstream-cpu gives the simulator a CPU to itself, so that nobody
// waits for it; -proxy-cpu gives every proxy (nginx, the floor proxy,
// the control-planes) one, so that it never takes turns with the client.
// The client gets the CPUs left, and every proxy runs in the same layout
// in the same rounds.

// cpuLayout is where each part of a run may run. A nil set means the
// client's: the part is not given a CPU of its own.
type cpuLayout struct {
	client  []int
	sim     []int
	proxies []int
}

// planCPUs lays out the CPUs this process may use (allowed): upstream
// for the simulator and proxy for the proxies, each -1 when not given,
// and what is left for the client.
func planCPUs(allowed []int, upstream, proxy int) (cpuLayout, error) {
	var l cpuLayout
	taken := map[int]bool{}
	for _, f := range []struct {
		flag string
		cpu  int
		set  *[]int
	}{{"-upstream-cpu", upstream, &l.sim}, {"-proxy-cpu", proxy, &l.proxies}} {
		if f.cpu == -1 {
			continue
		}
		if !slices.Contains(allowed, f.cpu) {
			return cpuLayout{}, fmt.Errorf("%s %d: not one of the CPUs this process may use (%v)", f.flag, f.cpu, allowed)
		}
		if taken[f.cpu] {
			return cpuLayout{}, fmt.Errorf("%s %d: the simulator and the proxies cannot both have CPU %d to themselves", f.flag, f.cpu, f.cpu)
		}
		taken[f.cpu] = true
		*f.set = []int{f.cpu}
	}
	for _, c := range allowed {
		if !taken[c] {
			l.client = append(l.client, c)
		}
	}
	if len(l.client) == 0 {
		return cpuLayout{}, fmt.Errorf("every CPU this process may use (%v) is given away: none is left for the client", allowed)
	}
	return l, nil
}
