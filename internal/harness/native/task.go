package native

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/tools"
)

// taskToolName is the sub-agent tool, Claude Code's name for it.
const taskToolName = "Task"

//go:embed prompts/subagent.md
var subagentPrompt string

const taskDescription = `Launch a sub-agent to carry out a self-contained task on its own: a search across the code, an investigation, a focused change with its own checks. The sub-agent has the same tools (except Task) and the same workspace, starts with no knowledge of this conversation, and returns one final report, which is all you see of its work. Give it a complete brief in prompt: the goal, what you already know, constraints, and what its report must contain. Use it to keep long explorations out of this conversation's context.`

var taskSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"description":   map[string]any{"type": "string", "description": "A short (3-5 word) description of the task"},
		"prompt":        map[string]any{"type": "string", "description": "The task for the sub-agent to perform"},
		"subagent_type": map[string]any{"type": "string", "description": "The type of specialized agent to use (only \"general-purpose\" exists)"},
	},
	"required": []string{"description", "prompt"},
}

type taskInput struct {
	Description  string `json:"description"`
	Prompt       string `json:"prompt"`
	SubagentType string `json:"subagent_type"`
}

// runTask runs a sub-agent to completion and returns its final text. Its
// transcript is kept under the session directory (subagents/<call id>.jsonl);
// what it does is streamed to the user twice: as its own events, each with
// parent_tool_use_id naming the call, and as text in the call's output.
func (a *agent) runTask(ctx context.Context, id string, input json.RawMessage) tools.Result {
	var in taskInput
	if err := json.Unmarshal(input, &in); err != nil || strings.TrimSpace(in.Prompt) == "" {
		return tools.Result{Output: "Task needs a non-empty prompt (and a short description).", IsError: true}
	}
	if in.SubagentType != "" && in.SubagentType != "general-purpose" {
		return tools.Result{Output: fmt.Sprintf("There is no sub-agent type %q; use \"general-purpose\" or leave it out.", in.SubagentType), IsError: true}
	}
	tr := &fileTranscript{}
	if a.sessionDir != "" {
		tr.path = filepath.Join(a.sessionDir, "subagents", safeName(id)+".jsonl")
	}
	var outMu sync.Mutex
	output := tools.StreamCap(MaxStreamedOutput, func(chunk string) {
		a.emit(contract.Event{Kind: contract.KindToolOutput, Tool: &contract.ToolEvent{ID: id, Name: taskToolName, Output: chunk}})
	})
	say := func(s string) { outMu.Lock(); output(s); outMu.Unlock() }
	sub := &agent{
		h: a.h, convID: a.convID, turnID: a.turnID, sessionDir: a.sessionDir, ws: a.ws, jail: a.jail,
		system:     a.h.systemBlocks(a.ws, true),
		transcript: tr,
		report:     a.report,
		log:        a.log.With("subagent", id),
		sub:        true,
		emit: func(ev contract.Event) {
			// The sub-agent's own events go out marked with the Task call
			// they belong to, so that a client nests them under it; the
			// Task call's output repeats them as text for clients that
			// read no parent (they would take the events for the main
			// agent's, and show them without it).
			switch ev.Kind {
			case contract.KindTextDelta, contract.KindMessage, contract.KindToolStarted,
				contract.KindToolOutput, contract.KindToolFinished, contract.KindUsage:
				ev.ParentToolUseID = id
				a.emit(ev)
			}
			switch ev.Kind {
			case contract.KindTextDelta:
				say(ev.Text)
			case contract.KindToolStarted:
				say(fmt.Sprintf("\n⏺ %s %s\n", ev.Tool.Name, compactJSON(ev.Tool.Input, 120)))
			case contract.KindToolFinished:
				if ev.Tool.IsError {
					say("  ⎿ error\n")
				}
			}
		},
	}
	sub.setTools(a.extraList)
	prompt, _ := json.Marshal(wireMessage{Role: "user", Content: []wireBlock{{Type: "text", Text: in.Prompt}}})
	if err := tr.Append(prompt); err != nil {
		return tools.Result{Output: "The sub-agent's transcript could not be written: " + err.Error(), IsError: true}
	}
	_, history, err := sub.loop(ctx, []json.RawMessage{prompt})
	final := lastAssistantText(history)
	if err != nil {
		if ctx.Err() != nil {
			return tools.Result{Output: interruptedText, IsError: true}
		}
		msg := "The sub-agent failed: " + err.Error()
		if final != "" {
			msg += "\nIts last words: " + final
		}
		return tools.Result{Output: msg, IsError: true}
	}
	if final == "" {
		return tools.Result{Output: "The sub-agent finished without a report.", IsError: true}
	}
	return tools.Result{Output: final}
}

func lastAssistantText(history []json.RawMessage) string {
	for i := len(history) - 1; i >= 0; i-- {
		var m wireMessage
		if json.Unmarshal(history[i], &m) != nil || m.Role != "assistant" {
			continue
		}
		var b strings.Builder
		for _, c := range m.Content {
			if c.Type == "text" {
				b.WriteString(c.Text)
			}
		}
		if s := strings.TrimSpace(b.String()); s != "" {
			return s
		}
	}
	return ""
}

func compactJSON(raw json.RawMessage, max int) string {
	s := string(raw)
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

// safeName keeps a tool_use id usable as a file name.
func safeName(id string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, id)
}

// fileTranscript keeps a sub-agent's transcript as JSON lines; with no path
// it keeps it in memory only. Compaction starts the in-memory view afresh.
type fileTranscript struct {
	harness.MemTranscript
	path string

	mu sync.Mutex // orders the appends to the file
}

func (f *fileTranscript) Append(rec json.RawMessage) error {
	if err := f.MemTranscript.Append(rec); err != nil {
		return err
	}
	return f.write(rec)
}

func (f *fileTranscript) Compact(rec json.RawMessage) error {
	if err := f.MemTranscript.Compact(rec); err != nil {
		return err
	}
	return f.write(rec)
}

// write appends rec to the file, if there is one.
func (f *fileTranscript) write(rec json.RawMessage) error {
	if f.path == "" {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
		return err
	}
	file, err := os.OpenFile(f.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer file.Close()
	_, err = file.Write(append(append([]byte(nil), rec...), '\n'))
	return err
}
