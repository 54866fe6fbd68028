package build

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talkide/platform/internal/build/buildtest"
	"github.com/talkide/platform/internal/sandbox/sandboxtest"
	"github.com/talkide/platform/internal/syncbuf"
)

func TestLocalRunsGradleInTheSandbox(t *testing.T) {
	ws := buildtest.Workspace(t)
	var out syncbuf.Buffer
	r := NewLocal(nil)
	res, err := r.Run(context.Background(), Request{
		Spec: Spec{Tasks: []string{"test"}}, Workspace: ws, Jail: sandboxtest.Jail(t, ws), Output: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != Succeeded || res.ExitCode != 0 || res.Where != "local" || res.Duration <= 0 {
		t.Errorf("result = %+v", res)
	}
	if !strings.Contains(out.String(), "args: --console=plain --no-daemon test") || !strings.Contains(out.String(), "BUILD SUCCESSFUL") {
		t.Errorf("output = %q", out.String())
	}
	if res.Tests == nil || res.Tests.Tests != 3 || res.Tests.Skipped != 1 || res.Tests.Failures != 0 {
		t.Errorf("tests = %+v", res.Tests)
	}
}

func TestLocalFailedBuild(t *testing.T) {
	ws := buildtest.Workspace(t)
	// A report of an earlier build is not this build's.
	old := filepath.Join(ws, "build/test-results/test/TEST-old.xml")
	os.MkdirAll(filepath.Dir(old), 0o755)
	os.WriteFile(old, []byte(`<testsuite><testcase classname="Old" name="x"/></testsuite>`), 0o644)
	long := time.Now().Add(-time.Hour)
	os.Chtimes(old, long, long)

	var out syncbuf.Buffer
	res, err := NewLocal(nil).Run(context.Background(), Request{
		Spec: Spec{Tasks: []string{"failing"}}, Workspace: ws, Jail: sandboxtest.Jail(t, ws), Output: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != Failed || res.ExitCode != 1 || res.Reason != "exit status 1" {
		t.Errorf("result = %+v", res)
	}
	if !strings.Contains(out.String(), "FailTest > breaks() FAILED") {
		t.Errorf("stderr missing from the output: %q", out.String())
	}
	if res.Tests == nil || res.Tests.Files != 1 || res.Tests.Tests != 2 || res.Tests.Failures != 1 || len(res.Tests.Failed) != 1 || res.Tests.Failed[0].Message != "expected: <1> but was: <2>" {
		t.Errorf("tests = %+v", res.Tests)
	}
}

func TestLocalCancelKillsTheTree(t *testing.T) {
	ws := buildtest.Workspace(t)
	var out syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// HostJail: the child's pid is the host's, to look for afterwards.
		_, err := NewLocal(nil).Run(ctx, Request{Spec: Spec{Tasks: []string{"slow"}}, Workspace: ws, Jail: sandboxtest.HostJail(t, ws), Output: &out})
		done <- err
	}()
	for b, _ := os.ReadFile(filepath.Join(ws, "child.pid")); !strings.HasSuffix(string(b), "\n"); b, _ = os.ReadFile(filepath.Join(ws, "child.pid")) {
		select {
		case err := <-done:
			t.Fatalf("the build ended before it was cancelled: %v, output %q", err, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel = %v, want context.Canceled", err)
	}
	// Run returns once the tree is gone: the background child too.
	b, err := os.ReadFile(filepath.Join(ws, "child.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the build's background child %d outlived the cancelled build (kill 0: %v)", pid, err)
	}
}

func TestLocalTimeout(t *testing.T) {
	ws := buildtest.Workspace(t)
	res, err := NewLocal(nil).Run(context.Background(), Request{Spec: Spec{Tasks: []string{"slow"}}, Workspace: ws, Jail: sandboxtest.Jail(t, ws), Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != TimedOut || !strings.Contains(res.Reason, "time limit of 500ms") {
		t.Errorf("result = %+v", res)
	}
}

func TestLocalRefuses(t *testing.T) {
	ws := buildtest.Workspace(t)
	os.WriteFile(filepath.Join(ws, "Dockerfile"), []byte("FROM scratch\n"), 0o644)
	r := NewLocal(nil)
	if _, err := r.Run(context.Background(), Request{Spec: Spec{Tasks: []string{"test"}}, Workspace: ws}); err == nil || !strings.Contains(err.Error(), "no sandbox") {
		t.Errorf("without a jail: %v", err)
	}
	if _, err := r.Run(context.Background(), Request{Spec: Spec{Kind: KindImage, Image: "r.io/a:1"}, Workspace: ws, Jail: sandboxtest.Jail(t, ws)}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("an image build: %v", err)
	}
	if _, err := r.Run(context.Background(), Request{Spec: Spec{Tasks: []string{"a;b"}}, Workspace: ws, Jail: sandboxtest.Jail(t, ws)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a bad task: %v", err)
	}
}
