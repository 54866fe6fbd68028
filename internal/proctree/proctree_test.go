package proctree

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A shell whose child is a sleep run under a name with a space and
// parentheses: the tree has both, in order, and the child's stat line is
// read past its name.
func TestTree(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	odd := filepath.Join(dir, "a) b (c")
	if err := os.Symlink(sleep, odd); err != nil {
		t.Fatal(err)
	}
	// The shell waits for its child, so the child cannot be re-parented
	// away before the test looks.
	sh := exec.Command("/bin/sh", "-c", `"$0" 60 & echo $!; wait`, odd)
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range Descendants(sh.Process.Pid) {
			syscall.Kill(d, syscall.SIGKILL)
		}
		sh.Process.Kill()
		sh.Wait()
	})
	var line [32]byte
	n, _ := out.Read(line[:])
	child, err := strconv.Atoi(strings.TrimSpace(string(line[:n])))
	if err != nil {
		t.Fatalf("the shell named no child: %q", line[:n])
	}
	self := os.Getpid()
	if got := Descendants(self); !slices.Contains(got, sh.Process.Pid) || !slices.Contains(got, child) ||
		slices.Index(got, sh.Process.Pid) > slices.Index(got, child) {
		t.Errorf("Descendants(self) = %v, want the shell %d before its child %d", got, sh.Process.Pid, child)
	}
	if got := Descendants(sh.Process.Pid); !slices.Equal(got, []int{child}) {
		t.Errorf("Descendants(shell) = %v, want [%d]", got, child)
	}
	// The child's name is set by its exec, which may not have happened yet.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(comm(child), ")") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(comm(child), ")") {
		t.Fatalf("the child never ran under its odd name: %q", comm(child))
	}
	if p, ok := Parent(child); !ok || p != sh.Process.Pid {
		t.Errorf("Parent(child) = %d, %v; want %d", p, ok, sh.Process.Pid)
	}
	if f := Stat(child); len(f) < 2 || f[0] != "S" && f[0] != "R" {
		t.Errorf("Stat(child) = %q, want a sleeping or running state first", f)
	}
}

func TestGone(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid // reaped: no /proc entry, unless the pid came round again at once
	if f := Stat(pid); f != nil {
		t.Logf("pid %d was reused: %q", pid, f)
		return
	}
	if _, ok := Parent(pid); ok {
		t.Error("Parent of a gone process found")
	}
	if d := Descendants(pid); len(d) != 0 {
		t.Errorf("Descendants of a gone process = %v", d)
	}
}

func comm(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return string(b)
}
