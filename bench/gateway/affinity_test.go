package main

import (
	"slices"
	"strings"
	"testing"
)

func TestPlanCPUs(t *testing.T) {
	for _, tc := range []struct {
		allowed              []int
		upstream, proxy      int
		client, sim, proxies []int
		err                  string
	}{
		{allowed: []int{0, 1}, upstream: 0, proxy: -1, client: []int{1}, sim: []int{0}},
		{allowed: []int{0, 1}, upstream: -1, proxy: 1, client: []int{0}, proxies: []int{1}},
		{allowed: []int{0, 1, 2, 3}, upstream: 2, proxy: 0, client: []int{1, 3}, sim: []int{2}, proxies: []int{0}},
		{allowed: []int{0, 1}, upstream: 2, proxy: -1, err: "-upstream-cpu 2: not one of the CPUs this process may use ([0 1])"},
		{allowed: []int{0, 1}, upstream: -1, proxy: -2, err: "-proxy-cpu -2: not one of the CPUs"},
		{allowed: []int{0, 1, 2}, upstream: 1, proxy: 1, err: "cannot both have CPU 1"},
		{allowed: []int{3}, upstream: 3, proxy: -1, err: "none is left for the client"},
		{allowed: []int{0, 1}, upstream: 0, proxy: 1, err: "none is left for the client"},
	} {
		got, err := planCPUs(tc.allowed, tc.upstream, tc.proxy)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v, %d, %d: error %v, want one saying %q", tc.allowed, tc.upstream, tc.proxy, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got.client, tc.client) || !slices.Equal(got.sim, tc.sim) || !slices.Equal(got.proxies, tc.proxies) {
			t.Errorf("%v, %d, %d: %+v, %v; want client %v, simulator %v, proxies %v", tc.allowed, tc.upstream, tc.proxy, got, err, tc.client, tc.sim, tc.proxies)
		}
	}
}
