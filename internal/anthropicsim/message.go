package anthropicsim

import "encoding/json"

// The JSON shapes of the Messages API responses, with fields in the order the
// real API writes them.

type messageJSON struct {
	ID           string  `json:"id"`
	Type         string  `json:"type"` // "message"
	Role         string  `json:"role"` // "assistant"
	Model        string  `json:"model"`
	Content      []any   `json:"content"`
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"` // always null: no stop_sequences support
	Usage        usage   `json:"usage"`
}

type textBlockJSON struct {
	Type string `json:"type"` // "text"
	Text string `json:"text"`
}

type toolUseBlockJSON struct {
	Type  string          `json:"type"` // "tool_use"
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// wire returns the block as it appears in a complete Message.
func (b contentBlock) wire() any {
	if b.Type == "tool_use" {
		return toolUseBlockJSON{Type: b.Type, ID: b.ID, Name: b.Name, Input: b.Input}
	}
	return textBlockJSON{Type: b.Type, Text: b.Text}
}

// startWire returns the block as content_block_start announces it: empty
// text, or an empty input object.
func (b contentBlock) startWire() any {
	if b.Type == "tool_use" {
		return toolUseBlockJSON{Type: b.Type, ID: b.ID, Name: b.Name, Input: json.RawMessage("{}")}
	}
	return textBlockJSON{Type: b.Type, Text: ""}
}

// message returns the non-streaming Message for rep.
func (rep *reply) message(id, model string) messageJSON {
	content := make([]any, 0, len(rep.Content))
	for _, b := range rep.Content {
		content = append(content, b.wire())
	}
	stop := rep.StopReason
	return messageJSON{
		ID: id, Type: "message", Role: "assistant", Model: model,
		Content: content, StopReason: &stop, Usage: rep.Usage,
	}
}

type countTokensJSON struct {
	InputTokens int64 `json:"input_tokens"`
}
