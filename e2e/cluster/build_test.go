package cluster

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
)

// projectArchive is testdata/project as a gzipped tar, base64-encoded: what
// Bash unpacks into a workspace.
func projectArchive(t *testing.T) string {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	root := filepath.Join("testdata", "project")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		rel, _ := filepath.Rel(root, path)
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: int64(fi.Mode().Perm()), Size: int64(len(b))}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = gz.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

// TestBuildRunsAsAJob: Build in a conversation whose worker runs builds as
// Kubernetes Jobs: a real Job pod runs the workspace's ./gradlew (a
// stand-in that compiles and runs JUnit tests with the builder image's
// JDK) with the workspace mounted from the session volume; the log streams
// into the chat as it runs; the summary names the failing test. Then a
// long build is interrupted: its Job and pod are deleted.
func TestBuildRunsAsAJob(t *testing.T) {
	e := clusterEnv(t)
	t.Parallel() // leaves acme/dev's worker running: see the package comment
	id := e.conversation(t)
	if res := e.bash(t, id, "echo "+projectArchive(t)+" | base64 -d | tar -xz && ls -l gradlew"); res.IsError {
		t.Fatalf("unpacking the project: %+v", res)
	}

	var streamed strings.Builder
	var result *contract.ToolEvent
	for _, ev := range e.turn(t, id, `[[tool:Build {"tasks": ["test"]}]]`) {
		switch {
		case ev.Kind == contract.KindToolOutput && ev.Tool != nil:
			streamed.WriteString(ev.Tool.Output)
		case ev.Kind == contract.KindToolFinished:
			result = ev.Tool
		}
	}
	if result == nil {
		t.Fatal("no tool.finished for Build")
	}
	for _, want := range []string{"> Task :compileJava", "> Task :test", "com.acme.CalcTest: 2 run, 1 failed"} {
		if !strings.Contains(streamed.String(), want) {
			t.Errorf("the streamed log lacks %q:\n%s", want, streamed.String())
		}
	}
	if !result.IsError || !strings.Contains(result.Output, "Tests: 2 run, 1 passed, 1 failed") ||
		!strings.Contains(result.Output, "com.acme.CalcTest > breaks (failed)") || !strings.Contains(result.Output, "the failing test of the cluster's build") {
		t.Errorf("the build's result:\n%s", result.Output)
	}

	// A build to interrupt: a Job whose pod runs for two minutes.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	r, err := e.client.Send(ctx, id, `[[tool:Build {"tasks": ["test"], "args": ["-Psleep=120"]}]]`)
	if err != nil {
		t.Fatal(err)
	}
	var pod string
	for pod == "" {
		if ctx.Err() != nil {
			t.Fatal("the build's pod never ran")
		}
		out := e.kubectl(t, "-n", "acme-dev", "get", "pods", "-l", "app.kubernetes.io/managed-by=talkide",
			"--field-selector", "status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}")
		if f := strings.Fields(out); len(f) > 0 {
			pod = f[0]
			break
		}
		time.Sleep(200 * time.Millisecond) // polling the cluster for the pod
	}
	t.Logf("figure: Build call to build pod Running: %s", time.Since(start).Round(100*time.Millisecond))
	if _, err := e.client.Interrupt(ctx, id); err != nil {
		t.Fatal(err)
	}
	var ended contract.Event
	err = e.client.Stream(ctx, id, 0, func(ev contract.Event) error {
		if ev.TurnID == r.TurnID && contract.Terminal(ev.Kind) {
			ended = ev
			return errTurnEnded
		}
		return nil
	})
	if !errors.Is(err, errTurnEnded) {
		t.Fatalf("the interrupted turn did not end: %v", err)
	}
	for {
		jobs := e.kubectl(t, "-n", "acme-dev", "get", "jobs", "-o", "name")
		pods := e.kubectl(t, "-n", "acme-dev", "get", "pods", "-l", "app.kubernetes.io/managed-by=talkide", "-o", "name")
		if strings.TrimSpace(jobs) == "" && strings.TrimSpace(pods) == "" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("after the interrupt (turn ended %s), jobs %q and pods %q remain", ended.Kind, jobs, pods)
		}
		time.Sleep(500 * time.Millisecond) // polling the cluster for the deletion
	}
	b, _ := json.Marshal(ended)
	t.Logf("the interrupted build's pod %s is gone; the turn ended %s", pod, b)
}
