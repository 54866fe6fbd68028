// Package sandboxtest gives tests the sandbox a worker would: the test
// binary as the helper, and a jail per test workspace. A test package that
// runs agent commands calls Main from its TestMain.
package sandboxtest

import (
	"os"
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
