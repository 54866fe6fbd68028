package sandbox

import (
	"fmt"
	"os"
	"slices"
	"strings"
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

// WithCPUMount has New take dir for the cpu hierarchy's mount point, the
// worker in its root: a directory that is none shows what a worker
// without one gets.
func WithCPUMount(o *Options, dir string) *Options {
	o.cpuMount = dir
	return o
}

// CgroupMount returns the mount point of controller's hierarchy.
func CgroupMount(controller string) (string, error) {
	mount, _, _, err := hierarchy(controller)
	return mount, err
}

// CgroupPath returns process pid's group as /proc shows it: in the v1
// hierarchy of controller, or else in v2's.
func CgroupPath(pid int, controller string) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	return CgroupPathOf(b, controller)
}

// CgroupPathOf is CgroupPath for the contents of a /proc/PID/cgroup.
func CgroupPathOf(b []byte, controller string) (string, error) {
	v2 := ""
	for line := range strings.Lines(string(b)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		switch {
		case len(f) != 3:
		case slices.Contains(strings.Split(f[1], ","), controller):
			return f[2], nil
		case f[0] == "0" && f[1] == "":
			v2 = f[2]
		}
	}
	if v2 == "" {
		return "", fmt.Errorf("in no %s group: %q", controller, b)
	}
	return v2, nil
}
