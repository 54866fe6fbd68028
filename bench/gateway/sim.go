package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/talkide/platform/internal/anthropicsim"
)

// The simulator apart (-sim-apart). Beside the client in this process, the
// simulator's writes of a stream and the client's reads of it share one
// Go runtime on the machine's CPUs: in a serial run without pauses the
// client's first read of the first event waits behind the simulator
// writing the rest. A real upstream is another machine; a process of its
// own is as near to that as loopback gets. What this costs the report:
// the split of each call into up, think and down, which needs the
// simulator's and the client's times on one clock, and the count of new
// upstream connections.

// simMain runs the simulator: sim-server LISTEN DELTA-DELAY. The key it
// accepts is this benchmark's (apiKey).
func simMain(args []string) error {
	if len(args) != 2 {
		return errors.New("usage: sim-server LISTEN DELTA-DELAY")
	}
	delay, err := time.ParseDuration(args[1])
	if err != nil {
		return fmt.Errorf("delta delay: %w", err)
	}
	ln, err := net.Listen("tcp", args[0])
	if err != nil {
		return err
	}
	return (&http.Server{Handler: newSim(delay), ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
}

// startSim starts the simulator as a process of its own and returns its
// URL once it answers.
func (s *stack) startSim(cfg stackConfig) (string, error) {
	url, _, stop, err := startSelf(cfg.simBin, cfg.tmpDir+"/simulator.log", cfg.simCPUs, "sim-server", cfg.deltaDelay.String())
	if err != nil {
		return "", err
	}
	s.closers = append(s.closers, stop)
	return url, nil
}

// newSim is the simulator of the benchmark's calls: it keeps one request
// body (it keeps the last ones for tests) and pauses delay before each
// delta.
func newSim(delay time.Duration) *anthropicsim.Simulator {
	return anthropicsim.New(apiKey, &anthropicsim.Options{ChunkDelay: delay, KeepRequests: 1})
}
