package proctest

import (
	"os"
	"os/exec"
	"slices"
	"testing"
)

func TestFindsAChild(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("sleep", "300.4242")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	byLine := func(p int) bool { return Cmdline(p) == Args("sleep", "300.4242") }
	if got := Pids(byLine); !slices.Equal(got, []int{pid}) {
		t.Errorf("by command line: %v, want [%d]", got, pid)
	}
	if got := Pids(func(p int) bool { return Cwd(p) == dir }); !slices.Equal(got, []int{pid}) {
		t.Errorf("by working directory: %v, want [%d]", got, pid)
	}
	if !Runs(pid) {
		t.Error("Runs is false for a running child")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if Runs(pid) || len(Pids(byLine)) != 0 {
		t.Error("a reaped child is still found")
	}
	if Runs(os.Getpid()) != true {
		t.Error("Runs is false for this process")
	}
}

func TestZombieHasExited(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	// Not reaped yet: a zombie once it has exited, which Runs must tell
	// apart from a live process. Poll /proc until it is one.
	for i := 0; Runs(cmd.Process.Pid); i++ {
		if i > 1_000_000 {
			t.Fatal("the child never exited")
		}
	}
	if Cmdline(cmd.Process.Pid) != "" {
		t.Errorf("a zombie's command line: %q", Cmdline(cmd.Process.Pid))
	}
}
