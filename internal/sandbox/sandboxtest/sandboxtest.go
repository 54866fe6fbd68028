// Package sandboxtest gives tests the sandbox a worker would: the test
// binary as the helper, and a jail per test workspace. A test package that
// runs agent commands calls Main from its TestMain.
package sandboxtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/talkide/platform/internal/sandbox"
)

// Main runs the helper when the test binary was started as one, and the
// tests otherwise.
func Main(m *testing.M) {
	sandbox.RunHelper()
	os.Exit(m.Run())
}

// MainBuilding is Main for tests that run a program of their own: before
// the tests it builds the package pkg, a path from the test's directory,
// into a new temporary directory as name, and calls built with the
// program's path; after them it removes the directory.
func MainBuilding(m *testing.M, pkg, name string, built func(bin string)) {
	sandbox.RunHelper()
	dir, err := os.MkdirTemp("", name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin := filepath.Join(dir, name)
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", pkg, err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	built(bin)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	once sync.Once
	sb   *sandbox.Sandbox
	err  error
)

// Sandbox returns the process's test sandbox: the strongest this machine
// has. A machine that has none fails the test, never skips it.
func Sandbox(t testing.TB) *sandbox.Sandbox {
	t.Helper()
	once.Do(func() { sb, err = sandbox.New(nil) })
	if err != nil {
		t.Fatal(err)
	}
	if u := sb.Unavailable(); u != nil {
		t.Fatalf("no sandbox on this machine: %v", u)
	}
	return sb
}

// Jail is a conversation's jail in workspace, with the environment a
// worker gives and no proxy.
func Jail(t testing.TB, workspace string) *sandbox.Jail {
	t.Helper()
	return &sandbox.Jail{
		Sandbox:   Sandbox(t),
		Workspace: workspace,
		Env:       sandbox.BaseEnv(workspace),
	}
}

var (
	hostOnce sync.Once
	hostSB   *sandbox.Sandbox
	hostErr  error
)

// HostJail is Jail with the first layer only: the processes keep the
// host's process ids, for tests that follow a process by its pid.
func HostJail(t testing.TB, workspace string) *sandbox.Jail {
	t.Helper()
	hostOnce.Do(func() { hostSB, hostErr = sandbox.New(&sandbox.Options{Mode: sandbox.ModeLandlock}) })
	if hostErr != nil {
		t.Fatal(hostErr)
	}
	if u := hostSB.Unavailable(); u != nil {
		t.Fatalf("no sandbox on this machine: %v", u)
	}
	j := Jail(t, workspace)
	j.Sandbox = hostSB
	return j
}
