package main

import (
	"slices"
	"strings"
	"testing"
)

func TestSplitCPUs(t *testing.T) {
	for _, tc := range []struct {
		allowed  []int
		upstream int
		rest     []int
		err      string
	}{
		{allowed: []int{0, 1}, upstream: 0, rest: []int{1}},
		{allowed: []int{0, 1}, upstream: 1, rest: []int{0}},
		{allowed: []int{0, 1, 2, 3}, upstream: 2, rest: []int{0, 1, 3}},
		{allowed: []int{0, 1}, upstream: 2, err: "not one of the CPUs this process may use ([0 1])"},
		{allowed: []int{0, 1}, upstream: -2, err: "not one of the CPUs"},
		{allowed: []int{3}, upstream: 3, err: "none would be left for the proxies"},
	} {
		got, err := splitCPUs(tc.allowed, tc.upstream)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v, %d: error %v, want one saying %q", tc.allowed, tc.upstream, err, tc.err)
			}
			continue
		}
		if err != nil || got.upstream != tc.upstream || !slices.Equal(got.rest, tc.rest) {
			t.Errorf("%v, %d: %+v, %v; want rest %v", tc.allowed, tc.upstream, got, err, tc.rest)
		}
	}
}
