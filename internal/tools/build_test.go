package tools

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/talkide/platform/internal/build"
	"github.com/talkide/platform/internal/build/buildtest"
)

// buildWorkspace is a workspace whose ./gradlew is the build package's
// stand-in for a Gradle wrapper (output, exit status, JUnit reports).
func buildWorkspace(t *testing.T) *Workspace {
	t.Helper()
	ws := newWorkspace(t)
	t.Cleanup(func() { ws.Close() })
	buildtest.FakeGradle(t, ws.Root())
	return ws
}

func runBuild(t *testing.T, tool *Build, ws *Workspace, input string, stateDir string) (Result, string, error) {
	t.Helper()
	var mu sync.Mutex
	var streamed strings.Builder
	res, err := tool.Run(context.Background(), Call{
		ID: "toolu_build1", Input: json.RawMessage(input), Workspace: ws, Jail: testJail(t, ws), Conversation: "conv1", StateDir: stateDir,
		Output: func(s string) { mu.Lock(); streamed.WriteString(s); mu.Unlock() },
	})
	return res, streamed.String(), err
}

func TestBuildToolSucceeds(t *testing.T) {
	ws := buildWorkspace(t)
	tool := &Build{Runner: build.NewLocal(nil)}
	res, streamed, err := runBuild(t, tool, ws, `{"tasks": ["test"]}`, "")
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatalf("a passing build is an error: %s", res.Output)
	}
	for _, s := range []string{
		"BUILD SUCCESSFUL",
		"Build succeeded: ./gradlew test (exit status 0, ",
		", local)",
		"Tests: 3 run, 2 passed, 0 failed, 0 errors, 1 skipped (1 report file)",
	} {
		if !strings.Contains(res.Output, s) {
			t.Errorf("result lacks %q:\n%s", s, res.Output)
		}
	}
	if !strings.Contains(streamed, "BUILD SUCCESSFUL in 1s\n") || strings.Contains(streamed, "Tests:") {
		t.Errorf("streamed output = %q", streamed)
	}
}

func TestBuildToolFailure(t *testing.T) {
	ws := buildWorkspace(t)
	res, _, err := runBuild(t, &Build{Runner: build.NewLocal(nil)}, ws, `{"tasks": ["failing"]}`, "")
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError {
		t.Fatalf("a failing build is not an error: %s", res.Output)
	}
	for _, s := range []string{
		"Build FAILED: ./gradlew failing (exit status 1, ",
		"Tests: 2 run, 1 passed, 1 failed, 0 errors, 0 skipped",
		"- com.acme.FailTest > breaks() (failed): org.opentest4j.AssertionFailedError: expected: <1> but was: <2>",
	} {
		if !strings.Contains(res.Output, s) {
			t.Errorf("result lacks %q:\n%s", s, res.Output)
		}
	}
}

func TestBuildToolSpillsLongOutput(t *testing.T) {
	ws := buildWorkspace(t)
	state := t.TempDir()
	res, streamed, err := runBuild(t, &Build{Runner: build.NewLocal(nil), MaxOutputBytes: 2000}, ws, `{"tasks": ["noisy"]}`, state)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Output, "[output truncated: ") || !strings.Contains(res.Output, "kept on the session volume as tool-output/toolu_build1.txt") {
		t.Errorf("result of a long build:\n%s", res.Output)
	}
	kept, err := os.ReadFile(filepath.Join(state, SpillDir, "toolu_build1.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if string(kept) != streamed || !strings.Contains(string(kept), "line 19999 of a noisy build\n") {
		t.Errorf("the kept output (%d bytes) is not what streamed (%d bytes)", len(kept), len(streamed))
	}
}

func TestBuildToolBadInput(t *testing.T) {
	ws := buildWorkspace(t)
	tool := &Build{Runner: build.NewLocal(nil)}
	for input, want := range map[string]string{
		`{"tasks": "test"}`:                      `field "tasks" must be an array`,
		`{}`:                                     "at least one Gradle task",
		`{"tasks": ["test; rm -rf /"]}`:          "not a Gradle task name",
		`{"tasks": ["test"], "args": ["a b"]}`:   "no shell",
		`{"kind": "image", "image": "r.io/a:1"}`: `dockerfile "Dockerfile" is not a file`,
		`{"tasks": ["test"], "timeout": -1}`:     "must not be negative",
		`{"kind": "make"}`:                       "kind must be",
	} {
		res, _, err := runBuild(t, tool, ws, input, "")
		if err != nil || !res.IsError || !strings.Contains(res.Output, want) {
			t.Errorf("input %s: %+v, %v; want an error saying %q", input, res, err, want)
		}
	}
	os.WriteFile(filepath.Join(ws.Root(), "Dockerfile"), []byte("FROM scratch\n"), 0o644)
	res, _, _ := runBuild(t, tool, ws, `{"kind": "image", "image": "r.io/a:1"}`, "")
	if !res.IsError || !strings.Contains(res.Output, "image builds run as Kubernetes Jobs") {
		t.Errorf("an image build on the local runner: %+v", res)
	}
	res, _, _ = runBuild(t, &Build{}, ws, `{"tasks": ["test"]}`, "")
	if !res.IsError || !strings.Contains(res.Output, "no build runner") {
		t.Errorf("without a runner: %+v", res)
	}
}

func TestBuildToolInterrupt(t *testing.T) {
	ws := buildWorkspace(t)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := (&Build{Runner: build.NewLocal(nil)}).Run(ctx, Call{
			ID: "toolu_b", Input: json.RawMessage(`{"tasks": ["slow"]}`), Workspace: ws, Jail: testJail(t, ws),
			Output: func(s string) {
				if strings.Contains(s, "> Task :slow") {
					once.Do(func() { close(started) })
				}
			},
		})
		done <- err
	}()
	<-started
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Build after an interrupt = %v, want context.Canceled", err)
	}
}

func TestDefaultToolsetWithBuilds(t *testing.T) {
	if Find(Default(nil), "Build") != nil {
		t.Error("Build is offered without a runner")
	}
	if Find(Default(&Options{Builds: build.NewLocal(nil)}), "Build") == nil {
		t.Error("Build is not offered with a runner")
	}
}
