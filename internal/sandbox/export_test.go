package sandbox

import (
	"os"
	"time"
)

// WaitingHelper waits until s has a helper waiting for a command
// (starting to keep one if s has not yet) and returns its process; nil
// when none comes within timeout.
func WaitingHelper(s *Sandbox, timeout time.Duration) *os.Process {
	deadline := time.Now().Add(timeout)
	for {
		s.warmMu.Lock()
		s.startKeepingWarm()
		h := s.ready
		s.warmMu.Unlock()
		if h != nil {
			return h.cmd.Process
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(2 * time.Millisecond)
	}
}
