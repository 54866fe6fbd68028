package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// browserReady returns the Chromium to drive, or fails (on CI, or with
// TALKIDE_REQUIRE_BROWSER=1) or skips the test when it or playwright-core
// (installed by scripts/web.sh into web/node_modules) is missing.
func browserReady(t *testing.T) string {
	t.Helper()
	exe := os.Getenv("TALKIDE_CHROMIUM")
	if exe == "" {
		exe = "/usr/bin/chromium"
	}
	missing := ""
	if _, err := os.Stat(exe); err != nil {
		missing = "Chromium (" + exe + "; scripts/chromium.sh installs it)"
	} else if _, err := os.Stat("../../web/node_modules/playwright-core/package.json"); err != nil {
		missing = "playwright-core (scripts/web.sh installs it)"
	} else if _, err := exec.LookPath("node"); err != nil {
		missing = "node"
	}
	if missing != "" {
		if os.Getenv("CI") != "" || os.Getenv("TALKIDE_REQUIRE_BROWSER") == "1" {
			t.Fatalf("the browser tests need %s", missing)
		}
		t.Skipf("no %s: the browser tests are skipped (./scripts/test.sh installs what they need)", missing)
	}
	return exe
}

// runScenario drives one scenario of web/test/scenarios.mjs against st and
// returns what it reported; onStep does what the scenario asks of the Go
// side. Screenshots stay in the printed directory when the test fails.
func runScenario(t *testing.T, st *devStack, name string, onStep func(string)) map[string]any {
	t.Helper()
	exe := browserReady(t)
	shots := os.Getenv("TALKIDE_ARTIFACTS")
	if shots != "" {
		shots = filepath.Join(shots, t.Name())
		os.MkdirAll(shots, 0o755)
	} else {
		var err error
		if shots, err = os.MkdirTemp("", "talkide-"+t.Name()+"-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if !t.Failed() {
				os.RemoveAll(shots)
			}
		})
	}
	t.Logf("screenshots: %s", shots)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "../../web/test/driver.mjs", name)
	cmd.Env = append(os.Environ(), "TALKIDE_URL="+st.info.ControlPlane, "TALKIDE_CHROMIUM="+exe, "TALKIDE_ARTIFACTS="+shots)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var result map[string]any
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "STEP "):
			onStep(strings.TrimPrefix(line, "STEP "))
			stdin.Write([]byte("ok\n"))
		case strings.HasPrefix(line, "RESULT "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "RESULT ")), &result); err != nil {
				t.Errorf("scenario result: %v", err)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("scenario %s: %v\n%s", name, err, stderr.String())
	}
	return result
}

func noSteps(t *testing.T) func(string) {
	return func(s string) { t.Errorf("unexpected step %q", s) }
}

func TestBrowserStream(t *testing.T) {
	browserReady(t)
	st, _ := startTestStack(t)
	runScenario(t, st, "stream", noSteps(t))
}

func TestBrowserReload(t *testing.T) {
	browserReady(t)
	st, _ := startTestStack(t)
	runScenario(t, st, "reload", noSteps(t))
}

func TestBrowserRestartControlPlane(t *testing.T) {
	browserReady(t)
	st, _ := startTestStack(t)
	runScenario(t, st, "restart", func(step string) {
		if step != "restart-controlplane" {
			t.Errorf("unexpected step %q", step)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := st.restartControlPlane(ctx); err != nil {
			t.Errorf("restart: %v", err)
		}
	})
}

func TestBrowserInterrupt(t *testing.T) {
	browserReady(t)
	st, _ := startTestStack(t)
	runScenario(t, st, "interrupt", noSteps(t))
}

func TestBrowserHostileMarkdown(t *testing.T) {
	browserReady(t)
	st, _ := startTestStack(t)
	runScenario(t, st, "hostile", noSteps(t))
}

func TestBrowserEditDiffAndIssue(t *testing.T) {
	browserReady(t)
	st, _ := startTestStack(t)
	runScenario(t, st, "edit", noSteps(t))
}
