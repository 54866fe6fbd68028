package native

import (
	"encoding/json"
	"fmt"
)

// A transcript record is one message in the Messages API's own JSON shape,
// {"role": …, "content": [...]}, as sent to the model. Keeping the wire shape
// means a record is replayed byte for byte and readable with standard tools.
type wireMessage struct {
	Role    string      `json:"role"`
	Content []wireBlock `json:"content"`
}

type wireBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	Source    *imageSource    `json:"source,omitempty"`
}

// repair makes a loaded transcript valid for the API after an interruption
// or crash: every tool_use of an assistant message must be answered by a
// tool_result in the next user message, and every tool_result must answer a
// tool_use of the message before it. It returns the records to send and the
// records to append to make the file valid (answers for dangling tool_uses).
func repair(records []json.RawMessage) (valid []json.RawMessage, appended []json.RawMessage, err error) {
	msgs := make([]wireMessage, len(records))
	for i, r := range records {
		if err := json.Unmarshal(r, &msgs[i]); err != nil {
			return nil, nil, fmt.Errorf("transcript record %d: %w", i, err)
		}
	}
	valid = make([]json.RawMessage, 0, len(records)+1)
	var pending []string // tool_use ids of the previous assistant message
	for i, m := range msgs {
		switch m.Role {
		case "assistant":
			if len(pending) > 0 {
				valid = append(valid, interruptedResults(pending))
			}
			pending = toolUseIDs(m)
			valid = append(valid, records[i])
		case "user":
			answered := map[string]bool{}
			keep := m.Content[:0:0]
			for _, b := range m.Content {
				if b.Type == "tool_result" {
					if !contains(pending, b.ToolUseID) || answered[b.ToolUseID] {
						continue // orphaned or repeated: the API would reject it
					}
					answered[b.ToolUseID] = true
				}
				keep = append(keep, b)
			}
			var missing []string
			for _, id := range pending {
				if !answered[id] {
					missing = append(missing, id)
				}
			}
			pending = nil
			if len(missing) > 0 {
				// Answers must come first in the user message that follows.
				keep = append(resultBlocks(missing), keep...)
			}
			if len(keep) == 0 {
				continue
			}
			if len(keep) == len(m.Content) && len(missing) == 0 {
				valid = append(valid, records[i])
				continue
			}
			b, err := json.Marshal(wireMessage{Role: "user", Content: keep})
			if err != nil {
				return nil, nil, err
			}
			valid = append(valid, b)
		default:
			// Only user and assistant records are written; skip anything else.
		}
	}
	if len(pending) > 0 {
		r := interruptedResults(pending)
		valid = append(valid, r)
		appended = append(appended, r)
	}
	valid, err = mergeUserRuns(valid)
	return valid, appended, err
}

// mergeUserRuns joins consecutive user messages (left by a turn that failed
// before the model answered) into one, keeping each block's bytes.
func mergeUserRuns(in []json.RawMessage) ([]json.RawMessage, error) {
	type rawMessage struct {
		Role    string            `json:"role"`
		Content []json.RawMessage `json:"content"`
	}
	out := in[:0]
	var prev *rawMessage
	for _, r := range in {
		var m rawMessage
		if err := json.Unmarshal(r, &m); err != nil {
			return nil, err
		}
		if prev != nil && prev.Role == "user" && m.Role == "user" {
			prev.Content = append(prev.Content, m.Content...)
			b, err := json.Marshal(prev)
			if err != nil {
				return nil, err
			}
			out[len(out)-1] = b
			continue
		}
		prev = &m
		out = append(out, r)
	}
	return out, nil
}

func toolUseIDs(m wireMessage) []string {
	var ids []string
	for _, b := range m.Content {
		if b.Type == "tool_use" {
			ids = append(ids, b.ID)
		}
	}
	return ids
}

const interruptedText = "The tool call was interrupted before it finished; its effects, if any, are unknown."

func resultBlocks(ids []string) []wireBlock {
	out := make([]wireBlock, len(ids))
	content, _ := json.Marshal(interruptedText)
	for i, id := range ids {
		out[i] = wireBlock{Type: "tool_result", ToolUseID: id, Content: content, IsError: true}
	}
	return out
}

func interruptedResults(ids []string) json.RawMessage {
	b, _ := json.Marshal(wireMessage{Role: "user", Content: resultBlocks(ids)})
	return b
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
