package anthropicsim

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// request is the part of a Messages API request the simulator acts on.
type request struct {
	Model     string
	MaxTokens int64 // 0 when not required (count_tokens) and absent
	Stream    bool
	Messages  []message
	Tools     []string // names of the offered tools, in request order

	// systemJSON and toolsJSON are the compacted "system" and "tools" values,
	// the prefix the cache rule looks at; empty when absent.
	systemJSON, toolsJSON []byte
	// system is the system prompt's text (its text blocks joined).
	system string
	// cacheControl reports whether a non-null "cache_control" key appears
	// anywhere in the body.
	cacheControl bool
}

// message is one entry of the messages array. Only the blocks the simulator
// answers from are kept: text, tool_result and image (checked as the API
// checks a base64 source). Other block types (tool_use, document,
// thinking...) are accepted and dropped.
type message struct {
	Role   string // "user", "assistant" or "system"
	Blocks []block
}

type block struct {
	Type string // "text", "tool_result" or "image"
	// MediaType and Bytes describe an image block's decoded data.
	MediaType string
	Bytes     int
	Text      string // text blocks: the text; tool_result: the result content as text
	// IsError marks a tool_result with "is_error": true.
	IsError bool
}

// The wire shapes, decoded leniently: polymorphic fields stay raw and are
// checked by hand so that the error message names the field.
type wireRequest struct {
	Model     *string         `json:"model"`
	MaxTokens *int64          `json:"max_tokens"`
	Stream    *bool           `json:"stream"`
	System    json.RawMessage `json:"system"`
	Messages  []wireMessage   `json:"messages"`
	Tools     json.RawMessage `json:"tools"`
}

type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type wireTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	Type        string          `json:"type"`
}

// parseRequest decodes and validates a Messages API request body. With
// needMaxTokens false (count_tokens) max_tokens may be absent. Every failure
// is a 400 invalid_request_error saying what is wrong.
func parseRequest(body []byte, needMaxTokens bool) (*request, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, &apiError{Status: 400, Type: errorType(400), Msg: describeJSONError(err), Err: err}
	}
	req := &request{}
	if w.Model == nil || *w.Model == "" {
		return nil, badRequest("model: field required")
	}
	req.Model = *w.Model
	switch {
	case w.MaxTokens != nil && *w.MaxTokens < 1:
		return nil, badRequest("max_tokens: must be at least 1, got %d", *w.MaxTokens)
	case w.MaxTokens != nil:
		req.MaxTokens = *w.MaxTokens
	case needMaxTokens:
		return nil, badRequest("max_tokens: field required")
	}
	if w.Stream != nil {
		req.Stream = *w.Stream
	}
	if len(w.Messages) == 0 {
		return nil, badRequest("messages: at least one message is required")
	}
	req.Messages = make([]message, 0, len(w.Messages))
	for i, wm := range w.Messages {
		switch wm.Role {
		case "user", "assistant", "system":
		case "":
			return nil, badRequest("messages.%d.role: field required", i)
		default:
			return nil, badRequest("messages.%d.role: must be \"user\" or \"assistant\", got %q", i, wm.Role)
		}
		blocks, err := parseContent(wm.Content, fmt.Sprintf("messages.%d.content", i))
		if err != nil {
			return nil, err
		}
		req.Messages = append(req.Messages, message{Role: wm.Role, Blocks: blocks})
	}
	if err := checkSystem(w.System); err != nil {
		return nil, err
	}
	if req.toolsJSON = compactJSON(w.Tools); req.toolsJSON != nil {
		var tools []wireTool
		if err := json.Unmarshal(req.toolsJSON, &tools); err != nil {
			return nil, badRequest("tools: must be an array of tool objects, each with a string name")
		}
		for i, t := range tools {
			if t.Name == "" {
				return nil, badRequest("tools.%d.name: field required", i)
			}
			req.Tools = append(req.Tools, t.Name)
		}
	}
	req.systemJSON = compactJSON(w.System)
	req.system = systemText(w.System)
	req.cacheControl = hasCacheControl(body)
	return req, nil
}

// parseContent reads a message's content: a string, or an array of blocks.
func parseContent(raw json.RawMessage, path string) ([]block, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("%s: field required", path)
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, badRequest("%s: invalid string", path)
		}
		return []block{{Type: "text", Text: s}}, nil
	case '[':
	default:
		return nil, badRequest("%s: must be a string or an array of content blocks", path)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest("%s: invalid array", path)
	}
	var blocks []block
	for i, item := range items {
		p := fmt.Sprintf("%s.%d", path, i)
		var head struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(item, &head); err != nil {
			return nil, badRequest("%s: must be a content block object with a string \"type\"", p)
		}
		switch head.Type {
		case "":
			return nil, badRequest("%s.type: field required", p)
		case "text":
			var b struct {
				Text *string `json:"text"`
			}
			if err := json.Unmarshal(item, &b); err != nil || b.Text == nil {
				return nil, badRequest("%s.text: must be a string", p)
			}
			blocks = append(blocks, block{Type: "text", Text: *b.Text})
		case "tool_result":
			var b struct {
				ToolUseID string          `json:"tool_use_id"`
				Content   json.RawMessage `json:"content"`
				IsError   bool            `json:"is_error"`
			}
			if err := json.Unmarshal(item, &b); err != nil {
				return nil, badRequest("%s: invalid tool_result block: %s", p, describeJSONError(err))
			}
			if b.ToolUseID == "" {
				return nil, badRequest("%s.tool_use_id: field required", p)
			}
			text, err := resultText(b.Content, p+".content")
			if err != nil {
				return nil, err
			}
			blocks = append(blocks, block{Type: "tool_result", Text: text, IsError: b.IsError})
		case "image":
			b, err := parseImage(item, p)
			if err != nil {
				return nil, err
			}
			blocks = append(blocks, b)
		}
	}
	return blocks, nil
}

// resultText flattens a tool_result's content (absent, a string, or an array
// of blocks of which only text blocks count) to text.
func resultText(raw json.RawMessage, path string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badRequest("%s: invalid string", path)
		}
		return s, nil
	case '[':
		var items []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(raw, &items); err != nil {
			return "", badRequest("%s: must be an array of content blocks", path)
		}
		var texts []string
		for _, it := range items {
			if it.Type == "text" {
				texts = append(texts, it.Text)
			}
		}
		return strings.Join(texts, "\n"), nil
	}
	return "", badRequest("%s: must be a string or an array of content blocks", path)
}

// systemText returns the text of a system prompt checkSystem accepted.
func systemText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Text string `json:"text"`
	}
	json.Unmarshal(raw, &blocks)
	var b strings.Builder
	for _, bl := range blocks {
		b.WriteString(bl.Text)
	}
	return b.String()
}

// checkSystem accepts an absent system prompt, a string, or an array of text
// blocks.
func checkSystem(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" || raw[0] == '"' {
		return nil
	}
	var items []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return badRequest("system: must be a string or an array of text blocks")
	}
	for i, it := range items {
		if it.Type != "text" {
			return badRequest("system.%d.type: must be \"text\"", i)
		}
	}
	return nil
}

// hasCacheControl reports whether body has an object key "cache_control" with
// a non-null value at any depth.
func hasCacheControl(body []byte) bool {
	if !bytes.Contains(body, []byte("cache_control")) {
		return false // the common case, without a second decode
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return false
	}
	return findKey(v, "cache_control")
}

func findKey(v any, key string) bool {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if k == key && x != nil {
				return true
			}
			if findKey(x, key) {
				return true
			}
		}
	case []any:
		for _, x := range v {
			if findKey(x, key) {
				return true
			}
		}
	}
	return false
}

func compactJSON(raw json.RawMessage) []byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return bytes.Clone(raw)
	}
	return b.Bytes()
}

// describeJSONError turns a decoding error into a message that names the
// field and avoids Go type names.
func describeJSONError(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("invalid JSON body: %s (at byte %d)", syn.Error(), syn.Offset)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "request body"
		}
		return fmt.Sprintf("%s: must be %s, got %s", field, kindName(typ.Type), typ.Value)
	}
	return "invalid JSON body: " + err.Error()
}

func kindName(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Pointer:
		return kindName(t.Elem())
	}
	return "another type"
}

// imageTypes are the media types the API takes in an image block.
var imageTypes = []string{"image/jpeg", "image/png", "image/gif", "image/webp"}

// parseImage reads an image block with a base64 source, refusing what the
// API refuses: another source type or media type, or data that is not
// base64.
func parseImage(item json.RawMessage, p string) (block, error) {
	var b struct {
		Source *struct {
			Type      string `json:"type"`
			MediaType string `json:"media_type"`
			Data      string `json:"data"`
		} `json:"source"`
	}
	if err := json.Unmarshal(item, &b); err != nil || b.Source == nil {
		return block{}, badRequest("%s.source: field required", p)
	}
	if b.Source.Type != "base64" {
		return block{}, badRequest("%s.source.type: the simulator takes \"base64\", got %q", p, b.Source.Type)
	}
	if !slices.Contains(imageTypes, b.Source.MediaType) {
		return block{}, badRequest("%s.source.media_type: must be one of %s, got %q", p, strings.Join(imageTypes, ", "), b.Source.MediaType)
	}
	data, err := base64.StdEncoding.DecodeString(b.Source.Data)
	if err != nil || len(data) == 0 {
		return block{}, badRequest("%s.source.data: must be non-empty base64", p)
	}
	return block{Type: "image", MediaType: b.Source.MediaType, Bytes: len(data)}, nil
}
