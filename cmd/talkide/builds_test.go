package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/talkide/platform/internal/contract"
)

// Mara runs the workspace's build with the Build tool in talkide dev (the
// local runner, the model simulator driving): the log streams to the chat
// and the test summary reaches the model and the chat.
func TestBuildToolInDev(t *testing.T) {
	st, _ := startTestStack(t)
	base := st.info.ControlPlane
	conv := createConversation(t, base).ID
	ws := filepath.Join(st.info.Workspaces, conv)
	b, err := os.ReadFile("../../internal/build/testdata/fakegradle/gradlew")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "gradlew"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	evs := turn(t, base, conv, `Run the tests. [[tool:Build {"tasks": ["failing"]}]]`)
	if end := terminal(t, evs); end.Kind != contract.KindTurnFinished {
		t.Fatalf("turn: %s %+v", end.Kind, end.Failure)
	}
	var live, final strings.Builder
	for _, s := range evs {
		switch s.ev.Kind {
		case contract.KindToolOutput:
			live.WriteString(s.ev.Tool.Output)
		case contract.KindMessage:
			final.Reset()
			final.WriteString(s.ev.Text)
		}
	}
	if !strings.Contains(live.String(), "FailTest > breaks() FAILED") {
		t.Errorf("the build's log did not stream: %q", live.String())
	}
	tools := finished(evs)
	if len(tools) != 1 || tools[0].Name != "Build" || !tools[0].IsError {
		t.Fatalf("tool.finished = %+v", tools)
	}
	for _, s := range []string{"Build FAILED: ./gradlew failing (exit status 1", "Tests: 2 run, 1 passed, 1 failed", "com.acme.FailTest > breaks() (failed)"} {
		if !strings.Contains(tools[0].Output, s) {
			t.Errorf("the result lacks %q:\n%s", s, tools[0].Output)
		}
	}
	// The simulator quotes the tool result it was given: the model saw it.
	if !strings.Contains(final.String(), "Build FAILED") {
		t.Errorf("the model's reply does not quote the build result: %q", final.String())
	}
}

func TestParseTolerations(t *testing.T) {
	got, err := parseTolerations([]string{"talkide.dev/builds:NoSchedule", "pool=builds:NoExecute"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Operator != corev1.TolerationOpExists || got[0].Key != "talkide.dev/builds" ||
		got[1].Operator != corev1.TolerationOpEqual || got[1].Value != "builds" || got[1].Effect != corev1.TaintEffectNoExecute {
		t.Errorf("parseTolerations = %+v", got)
	}
	for _, bad := range []string{"x", ":NoSchedule", "x:Sometimes"} {
		if _, err := parseTolerations([]string{bad}); err == nil {
			t.Errorf("parseTolerations(%q) accepted it", bad)
		}
	}
	if err := (&buildFlags{runner: "cloud"}).check(); err == nil || !strings.Contains(err.Error(), "want local, kubernetes or none") {
		t.Errorf("--builds cloud: %v", err)
	}
}
