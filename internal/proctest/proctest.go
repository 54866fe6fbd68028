// Package proctest finds the host's processes by what /proc says of them,
// for tests that check that a command's processes are gone, or still run.
package proctest

import (
	"os"
	"strconv"
	"strings"

	"github.com/talkide/platform/internal/proctree"
)

// Pids returns the pids of the processes for which match is true.
func Pids(match func(pid int) bool) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && match(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// Cmdline is the command line of pid, each argument followed by a NUL as
// /proc/PID/cmdline has it, or "" when it cannot be read (the process is
// gone, or is a kernel thread).
func Cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return string(b)
}

// Args is the command line args in the form of Cmdline.
func Args(args ...string) string {
	return strings.Join(args, "\x00") + "\x00"
}

// Cwd is the working directory of pid, or "" when it cannot be read.
func Cwd(pid int) string {
	cwd, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	return cwd
}

// Runs reports whether pid is a process that has not exited: a zombie
// waiting to be reaped has.
func Runs(pid int) bool {
	f := proctree.Stat(pid)
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}
