package native

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/talkide/platform/internal/contract"
)

// Context window defaults: compaction starts when a request's prompt reaches
// DefaultCompactAt of DefaultContextWindow tokens.
const (
	DefaultContextWindow = 200_000
	DefaultCompactAt     = 0.8
)

func (h *Harness) compactAt() int64 {
	return int64(float64(h.opts.ContextWindow) * h.opts.CompactAt)
}

// estimateTokens guesses a history's size before any call has measured it:
// about four bytes a token.
func estimateTokens(history []json.RawMessage) int64 {
	var n int
	for _, r := range history {
		n += len(r) - imageDiscount(r)
	}
	return int64(n / 4)
}

// compactInstruction asks the model for the summary that replaces the
// history.
const compactInstruction = `[Context compaction] The conversation is about to exceed the context window. Write a summary that lets you continue the work without the earlier messages: the user's goals and requests, decisions made and why, the current state of the work (files created or changed and what they contain, commands that pass or fail), open problems, and the next steps. Be specific: names, paths, commands, error messages. Reply with the summary only; do not call tools.`

// compact replaces the history with a summary written by the model. It never
// separates a tool_use from its tool_result: the summary covers whole
// messages, and a last user message that answers tool calls is summarized
// with them rather than kept. A last user message with only text (the
// user's new request) is kept verbatim after the summary.
func (a *agent) compact(ctx context.Context, history []json.RawMessage) ([]json.RawMessage, error) {
	var tail json.RawMessage
	body := history
	if n := len(history); n > 1 && isPlainUser(history[n-1]) {
		body, tail = history[:n-1], history[n-1]
	}
	ask, _ := json.Marshal(wireMessage{Role: "user", Content: []wireBlock{{Type: "text", Text: compactInstruction}}})
	req, err := mergeUserRuns(append(append([]json.RawMessage(nil), body...), ask))
	if err != nil {
		return history, persistErr(err)
	}
	msg, err := a.callModel(ctx, req, true)
	if err != nil {
		return history, err
	}
	summary := strings.TrimSpace(messageText(msg))
	if summary == "" {
		// Nothing to compact with: go on with the full history and let the
		// API say if it is too long.
		a.log.Warn("compaction produced no summary; keeping the history")
		a.lastInput = 0
		return history, nil
	}
	text := fmt.Sprintf("[This conversation was compacted: %d earlier messages were replaced by this summary.]\n\n%s", len(body), summary)
	if tail == nil {
		text += "\n\nContinue the work from here."
	}
	rec, _ := json.Marshal(wireMessage{Role: "user", Content: []wireBlock{{Type: "text", Text: text}}})
	if err := a.transcript.Compact(rec); err != nil {
		return history, persistErr(err)
	}
	out := []json.RawMessage{rec}
	if tail != nil {
		if err := a.transcript.Append(tail); err != nil {
			return history, persistErr(err)
		}
		if out, err = mergeUserRuns(append(out, tail)); err != nil {
			return history, persistErr(err)
		}
	}
	a.emit(contract.Event{Kind: contract.KindNotice, Text: fmt.Sprintf("context compacted: %d earlier messages summarized", len(body))})
	a.log.Info("context compacted", "messages", len(body), "prompt_tokens", a.lastInput)
	a.lastInput = estimateTokens(out)
	return out, nil
}

// isPlainUser reports whether a record is a user message without
// tool_result blocks.
func isPlainUser(raw json.RawMessage) bool {
	var m wireMessage
	if json.Unmarshal(raw, &m) != nil || m.Role != "user" {
		return false
	}
	for _, b := range m.Content {
		if b.Type == "tool_result" {
			return false
		}
	}
	return true
}
