package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// cpusAllowed reads a task's Cpus_allowed_list from its status file.
func cpusAllowed(t *testing.T, status string) string {
	t.Helper()
	b, err := os.ReadFile(status)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("%s has no Cpus_allowed_list", status)
	return ""
}

// TestStartOn: the child runs on the CPU it was given, and no thread of
// this process is left on that CPU alone.
func TestStartOn(t *testing.T) {
	allowed, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(allowed) < 2 {
		t.Skipf("this process may use %v: one CPU cannot be given to a child alone", allowed)
	}
	own := cpusAllowed(t, "/proc/self/status")
	last := allowed[len(allowed)-1]
	cmd := exec.Command("sleep", "30")
	if err := startOn(cmd, []int{last}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if got := cpusAllowed(t, "/proc/"+strconv.Itoa(cmd.Process.Pid)+"/status"); got != strconv.Itoa(last) {
		t.Errorf("the child may use CPUs %q, want %d alone", got, last)
	}
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) == 0 {
		t.Fatalf("this process's threads: %v, %v", tasks, err)
	}
	for _, st := range tasks {
		if got := cpusAllowed(t, st); got != own {
			t.Errorf("%s may use CPUs %q after the start, want %q as before", st, got, own)
		}
	}
}
