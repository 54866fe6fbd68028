// Package historytest checks a conversation's history as the native
// harness keeps it against what the Messages API requires, for the
// harness's tests and for those that read a session volume after a crash.
package historytest

import (
	"encoding/json"
	"fmt"
	"strings"
)

// transcriptBlock and transcriptMessage are the Messages API wire shape the
// native harness writes.
type transcriptBlock struct {
	Type      string `json:"type"`
	Text      string `json:"text,omitempty"`
	ID        string `json:"id,omitempty"`
	ToolUseID string `json:"tool_use_id,omitempty"`
}

type transcriptMessage struct {
	Role    string            `json:"role"`
	Content []json.RawMessage `json:"content"`
}

// Check checks what the Messages API requires of a conversation, after
// consecutive user messages are merged as the native harness merges them
// before sending: roles alternate starting with user;
// every tool_use is answered by exactly one tool_result at the start of the
// next message; every tool_result answers a tool_use of the message right
// before it; no message and no text block is empty. With openEnd, the last
// message may be an assistant message whose tool calls are unanswered: a
// turn cut off by a crash, which the harness answers (and appends) before
// its next model call.
func Check(recs []json.RawMessage, openEnd bool) error {
	var msgs []transcriptMessage
	for i, r := range recs {
		var m transcriptMessage
		if err := json.Unmarshal(r, &m); err != nil {
			return fmt.Errorf("record %d %s: %w", i, r, err)
		}
		if n := len(msgs); n > 0 && msgs[n-1].Role == "user" && m.Role == "user" {
			msgs[n-1].Content = append(msgs[n-1].Content, m.Content...)
			continue
		}
		msgs = append(msgs, m)
	}
	var pending map[string]bool // tool_use ids of the previous message
	for i, m := range msgs {
		want := "user"
		if i%2 == 1 {
			want = "assistant"
		}
		if m.Role != want {
			return fmt.Errorf("message %d has role %q, want %q (roles alternate, starting with user)", i, m.Role, want)
		}
		if len(m.Content) == 0 {
			return fmt.Errorf("message %d has no content", i)
		}
		answered := map[string]bool{}
		seenOther := false
		next := map[string]bool{}
		for _, raw := range m.Content {
			var b transcriptBlock
			if err := json.Unmarshal(raw, &b); err != nil {
				return fmt.Errorf("message %d: block %s: %w", i, raw, err)
			}
			switch b.Type {
			case "text":
				if strings.TrimSpace(b.Text) == "" {
					return fmt.Errorf("message %d has an empty text block (the API rejects it)", i)
				}
				seenOther = true
			case "tool_result":
				switch {
				case m.Role != "user":
					return fmt.Errorf("message %d: tool_result in an %s message", i, m.Role)
				case !pending[b.ToolUseID]:
					return fmt.Errorf("message %d: tool_result %q answers no tool_use of the previous message", i, b.ToolUseID)
				case answered[b.ToolUseID]:
					return fmt.Errorf("message %d: tool_use %q answered twice", i, b.ToolUseID)
				case seenOther:
					return fmt.Errorf("message %d: tool_result %q comes after other content", i, b.ToolUseID)
				}
				answered[b.ToolUseID] = true
			case "tool_use":
				next[b.ID] = true
				seenOther = true
			default:
				seenOther = true
			}
		}
		for id := range pending {
			if !answered[id] {
				return fmt.Errorf("message %d does not answer tool_use %q of the message before it", i, id)
			}
		}
		pending = next
	}
	if len(pending) > 0 && !openEnd {
		return fmt.Errorf("the last message leaves tool_use calls unanswered: %v", pending)
	}
	return nil
}
