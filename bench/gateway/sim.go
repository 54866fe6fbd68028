package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
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
	sim := anthropicsim.New(apiKey, &anthropicsim.Options{ChunkDelay: delay, KeepRequests: 1})
	return (&http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
}

// startSim starts the simulator as a process of its own and returns its
// URL once it answers.
func (s *stack) startSim(cfg stackConfig) (string, error) {
	bin := cfg.simBin
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return "", err
		}
		bin = self
	}
	port, err := freePort()
	if err != nil {
		return "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "sim-server", addr, cfg.deltaDelay.String())
	exited, stop, err := startProc(cmd, cfg.tmpDir+"/simulator.log", 10*time.Second)
	if err != nil {
		return "", err
	}
	s.closers = append(s.closers, stop)
	url := "http://" + addr
	if err := waitHTTP(context.Background(), url+"/", exited); err != nil {
		return "", err
	}
	return url, nil
}
