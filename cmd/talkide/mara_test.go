package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/harness/historytest"
)

// turn sends text and returns the events of that turn, through its terminal
// event.
func turn(t *testing.T, base, conv, text string) []streamed {
	t.Helper()
	var state contractView
	api(t, http.MethodGet, base+"/api/conversations/"+conv, nil, &state)
	r := send(t, base, conv, text)
	return readStream(t, base, conv, state.State.LastSeq, turnEnded(r.TurnID))
}

// finished returns the main agent's finished tool calls (not a
// sub-agent's, which name their Task call as their parent).
func finished(evs []streamed) []*contract.ToolEvent {
	var out []*contract.ToolEvent
	for _, s := range evs {
		if s.ev.Kind == contract.KindToolFinished && s.ev.ParentToolUseID == "" {
			out = append(out, s.ev.Tool)
		}
	}
	return out
}

func terminal(t *testing.T, evs []streamed) contract.Event {
	t.Helper()
	last := evs[len(evs)-1].ev
	if !contract.Terminal(last.Kind) {
		t.Fatalf("turn did not end: last event %s", last.Kind)
	}
	return last
}

// A scripted coding session with the native harness against the simulator,
// as a user would drive it over days: write a file, edit it, grep it, run a
// command, fix, run again, delegate to a sub-agent, interrupt a long
// command and go on.
func TestScriptedCodingSession(t *testing.T) {
	st, _ := startTestStack(t)
	base := st.Info.ControlPlane
	conv := createConversation(t, base).ID
	ws := filepath.Join(st.Info.Workspaces, conv)

	steps := []struct {
		name, text string
		check      func(t *testing.T, tools []*contract.ToolEvent)
	}{
		{"write", `[[tool:Write {"file_path":"calc.sh","content":"#!/bin/sh\necho $((2 + 2 * 10))\nexit 3\n"}]]`, func(t *testing.T, tools []*contract.ToolEvent) {
			if len(tools) != 1 || tools[0].IsError {
				t.Fatalf("Write: %+v", tools)
			}
		}},
		{"run fails", `[[tool:Bash {"command":"sh calc.sh"}]]`, func(t *testing.T, tools []*contract.ToolEvent) {
			if !tools[0].IsError || !strings.Contains(tools[0].Output, "22") || !strings.Contains(tools[0].Output, "exit status 3") {
				t.Fatalf("first run: %+v", tools[0])
			}
		}},
		{"grep", `[[tool:Grep {"pattern":"exit [0-9]+","output_mode":"content"}]]`, func(t *testing.T, tools []*contract.ToolEvent) {
			if !strings.Contains(tools[0].Output, "calc.sh:3:exit 3") {
				t.Fatalf("Grep: %q", tools[0].Output)
			}
		}},
		{"edit", `[[tool:Edit {"file_path":"calc.sh","old_string":"exit 3","new_string":"exit 0"}]]`, func(t *testing.T, tools []*contract.ToolEvent) {
			if tools[0].IsError {
				t.Fatalf("Edit: %q", tools[0].Output)
			}
		}},
		{"run passes", `[[tool:Bash {"command":"sh calc.sh && echo PASS"}]]`, func(t *testing.T, tools []*contract.ToolEvent) {
			if tools[0].IsError || !strings.Contains(tools[0].Output, "22\nPASS") {
				t.Fatalf("second run: %+v", tools[0])
			}
		}},
		{"sub-agent", `[[tool:Task {"description":"add a README","prompt":"[[tool:Write {\"file_path\":\"README.md\",\"content\":\"calc prints 22\"}]]"}]]`, func(t *testing.T, tools []*contract.ToolEvent) {
			if len(tools) != 1 || tools[0].Name != "Task" || tools[0].IsError {
				t.Fatalf("Task: %+v", tools)
			}
		}},
	}
	for _, step := range steps {
		evs := turn(t, base, conv, step.text)
		if end := terminal(t, evs); end.Kind != contract.KindTurnFinished {
			t.Fatalf("%s: %s %+v", step.name, end.Kind, end.Failure)
		}
		step.check(t, finished(evs))
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "calc.sh")); !strings.Contains(string(b), "exit 0") {
		t.Fatalf("calc.sh = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "README.md")); string(b) != "calc prints 22" {
		t.Fatalf("the sub-agent's README = %q", b)
	}

	// Interrupt a long command; the session goes on with its history.
	var state contractView
	api(t, http.MethodGet, base+"/api/conversations/"+conv, nil, &state)
	r := send(t, base, conv, `[[tool:Bash {"command":"echo started; sleep 30"}]]`)
	readStream(t, base, conv, state.State.LastSeq, func(ev contract.Event) bool {
		return ev.Kind == contract.KindToolOutput && strings.Contains(ev.Tool.Output, "started")
	})
	start := time.Now()
	var ir contract.InterruptResponse
	if st := api(t, http.MethodPost, base+"/api/conversations/"+conv+"/interrupt", nil, &ir); st != http.StatusOK || !ir.Interrupted {
		t.Fatalf("interrupt: %d %+v", st, ir)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("interrupting a sleep 30 took %s", time.Since(start))
	}
	evs := readStream(t, base, conv, state.State.LastSeq, turnEnded(r.TurnID))
	if end := terminal(t, evs); end.Kind != contract.KindTurnFailed || end.Failure.Code != contract.FailInterrupted {
		t.Fatalf("interrupted turn ended with %+v", end)
	}
	evs = turn(t, base, conv, "what happened?")
	if end := terminal(t, evs); end.Kind != contract.KindTurnFinished {
		t.Fatalf("after the interrupt: %+v", end)
	}

	// The transcript is a valid conversation for the API, and the model saw
	// all of it.
	var body struct {
		Messages []json.RawMessage `json:"messages"`
	}
	reqs := agentRequests(st)
	json.Unmarshal(reqs[len(reqs)-1], &body)
	if len(body.Messages) < 20 {
		t.Fatalf("the last request carried %d messages", len(body.Messages))
	}
	checkTranscriptValid(t, st.Info.ClaudeConfigDir, conv)
}

// checkTranscriptValid reads a session read-only and validates its
// transcript as the Messages API would.
func checkTranscriptValid(t *testing.T, claudeConfigDir, conv string) {
	t.Helper()
	l, err := readSession(filepath.Join(claudeConfigDir, "projects"), conv)
	if err != nil {
		t.Fatalf("read session: %v", err)
	}
	if err := historytest.Check(l.transcript, false); err != nil {
		t.Fatalf("transcript: %v", err)
	}
}
