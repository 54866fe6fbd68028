package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/build/buildtest"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/syncbuf"
)

// The Claude Code harness's own tools over MCP, with the real CLI: the
// simulated model files an issue through talkide-issue-tracking (which the
// control-plane then lists for the conversation, filed in that turn) and
// runs the workspace's stand-in Gradle wrapper through talkide-build's Build,
// whose log streams as tool.output and whose summary reaches the tool result
// and the model. The capability the CLI used for both appears in no log line
// and no event.
func TestClaudeCodeWorkerTools(t *testing.T) {
	logs := &syncbuf.Buffer{}
	st := startClaudeCodeStack(t, debugLogger(logs))
	base := st.Info.ControlPlane
	c := createConversation(t, base)
	ws := filepath.Join(st.Info.Workspaces, c.ID)
	buildtest.FakeGradle(t, ws)

	const report = "mcp__talkide-issue-tracking__report_issue"
	r1 := send(t, base, c.ID, `File it. [[tool:`+report+` {"title":"Flaky test","body":"TestFoo fails one run in ten.","severity":"high","labels":["ci"]}]]`)
	first := readStream(t, base, c.ID, 0, turnEnded(r1.TurnID))
	turnFinished(t, first)
	filed := toolResults(first, r1.TurnID)[report]
	if len(filed) != 1 || filed[0].IsError || !strings.Contains(filed[0].Output, "Filed issue iss_") {
		t.Fatalf("%s results: %+v", report, *filed[0])
	}
	var issues contract.IssueList
	if status := api(t, http.MethodGet, base+"/api/conversations/"+c.ID+"/issues", nil, &issues); status != http.StatusOK {
		t.Fatalf("GET issues: status %d", status)
	}
	if len(issues.Issues) != 1 {
		t.Fatalf("issues: %+v", issues.Issues)
	}
	if i := issues.Issues[0]; i.Title != "Flaky test" || i.Severity != "high" || i.ConversationID != c.ID || i.TurnID != r1.TurnID ||
		!strings.Contains(filed[0].Output, i.ID) {
		t.Errorf("issue %+v (result %q)", i, filed[0].Output)
	}

	const buildTool = "mcp__talkide-build__Build"
	r2 := send(t, base, c.ID, `Run the tests. [[tool:`+buildTool+` {"tasks":["failing"]}]]`)
	second := readStream(t, base, c.ID, first[len(first)-1].ev.Seq, turnEnded(r2.TurnID))
	turnFinished(t, second)
	builds := toolResults(second, r2.TurnID)[buildTool]
	if len(builds) != 1 || !builds[0].IsError {
		t.Fatalf("%s results: %+v", buildTool, builds)
	}
	for _, want := range []string{"Build FAILED: ./gradlew failing (exit status 1", "Tests: 2 run, 1 passed, 1 failed", "com.acme.FailTest > breaks() (failed)"} {
		if !strings.Contains(builds[0].Output, want) {
			t.Errorf("the Build result lacks %q:\n%s", want, builds[0].Output)
		}
	}
	var live strings.Builder
	var final string
	for _, s := range second {
		switch {
		case s.ev.Kind == contract.KindToolOutput && s.ev.Tool.ID == builds[0].ID:
			live.WriteString(s.ev.Tool.Output)
		case s.ev.Kind == contract.KindMessage:
			final = s.ev.Text
		}
	}
	if !strings.Contains(live.String(), "FailTest > breaks() FAILED") {
		t.Errorf("the build's log did not stream as tool.output of the call: %q", live.String())
	}
	if !strings.Contains(final, "Build FAILED") {
		t.Errorf("the model's reply does not quote the build result: %q", final)
	}

	capability := st.Worker.LocalProxy.Capability(c.ID)
	// The CLI's command line, which every process in its sandbox can read,
	// names the servers and not the credential.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", theCLI(t, ws)))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--strict-mcp-config", "/" + c.ID + "/mcp/talkide-build", "${TALKIDE_MCP_TOKEN}", "mcp__talkide-issue-tracking"} {
		if !strings.Contains(string(cmdline), want) {
			t.Errorf("the CLI's command line lacks %q: %q", want, cmdline)
		}
	}
	if strings.Contains(string(cmdline), capability) {
		t.Error("the capability is on the CLI's command line")
	}
	last := second[len(second)-1].ev.Seq

	// An interrupt during a build stops it: the build runs in a sandbox of
	// the worker's, not under the CLI, so only the call's end kills it.
	r3 := send(t, base, c.ID, `[[tool:`+buildTool+` {"tasks":["slow"]}]]`)
	readStream(t, base, c.ID, last, func(ev contract.Event) bool {
		return ev.Kind == contract.KindToolOutput && strings.Contains(ev.Tool.Output, "> Task :slow")
	})
	var ir contract.InterruptResponse
	if code := api(t, "POST", base+"/api/conversations/"+c.ID+"/interrupt", nil, &ir); code != 200 || !ir.Interrupted {
		t.Fatalf("interrupt: %d %+v", code, ir)
	}
	third := readStream(t, base, c.ID, last, turnEnded(r3.TurnID))
	if end := third[len(third)-1].ev; end.Kind != contract.KindTurnFailed || end.Failure.Code != contract.FailInterrupted {
		t.Fatalf("interrupted turn ended with %s %+v", end.Kind, end.Failure)
	}
	waitNoProcessesIn(t, ws, 10*time.Second)
	all := append(append(first, second...), third...)

	// Nor is it in any file of the session volume (the transcript, the
	// CLI's own state and session files) or of the workspace.
	var transcripts []string // files that hold the first turn's tool call
	for _, root := range []string{st.Info.ClaudeConfigDir, ws} {
		filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return nil
			}
			if bytes.Contains(b, []byte(capability)) {
				t.Errorf("the capability is written in %s", path)
			}
			if bytes.Contains(b, []byte("TestFoo fails one run in ten.")) {
				transcripts = append(transcripts, filepath.Base(path))
			}
			return nil
		})
	}
	if !slices.Contains(transcripts, "transcript.jsonl") || len(transcripts) < 2 {
		t.Errorf("the files searched hold the session's transcript and the CLI's own: %v", transcripts)
	}
	if strings.Contains(logs.String(), capability) {
		t.Error("the conversation's capability is in the log")
	}
	for _, s := range all {
		if b, _ := json.Marshal(s.ev); strings.Contains(string(b), capability) {
			t.Errorf("the capability is in event %d (%s)", s.ev.Seq, s.ev.Kind)
		}
	}
}
