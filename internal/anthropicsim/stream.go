package anthropicsim

import (
	"context"
	"io"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/sse"
)

// Sizes of streamed deltas.
const (
	wordsPerTextDelta = 3
	maxJSONDelta      = 24 // bytes of partial_json per input_json_delta
)

// The streaming event shapes.
type (
	messageStartEvent struct {
		Type    string      `json:"type"`
		Message messageJSON `json:"message"`
	}
	typeEvent struct {
		Type string `json:"type"`
	}
	blockStartEvent struct {
		Type         string `json:"type"`
		Index        int    `json:"index"`
		ContentBlock any    `json:"content_block"`
	}
	blockDeltaEvent struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
		Delta any    `json:"delta"`
	}
	textDelta struct {
		Type string `json:"type"` // "text_delta"
		Text string `json:"text"`
	}
	inputJSONDelta struct {
		Type        string `json:"type"` // "input_json_delta"
		PartialJSON string `json:"partial_json"`
	}
	blockStopEvent struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}
	messageDeltaEvent struct {
		Type  string            `json:"type"`
		Delta messageDeltaDelta `json:"delta"`
		Usage usage             `json:"usage"`
	}
	messageDeltaDelta struct {
		StopReason   string  `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	}
)

// writeStream writes rep as the server-sent events of a streamed Message:
// message_start, ping, then content_block_start / content_block_delta... /
// content_block_stop per block, message_delta and message_stop. flush is
// called after every event. Before each delta it waits pause, and it stops
// with ctx's error as soon as ctx is done.
func writeStream(ctx context.Context, w io.Writer, flush func(), id, model string, rep *reply, pause time.Duration) error {
	emit := func(event string, v any) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err := marshal(v)
		if err != nil {
			return err
		}
		if err := sse.Write(w, "", event, data); err != nil {
			return err
		}
		flush()
		return nil
	}

	start := messageJSON{
		ID: id, Type: "message", Role: "assistant", Model: model, Content: []any{},
		Usage: usage{
			InputTokens:              rep.Usage.InputTokens,
			OutputTokens:             1,
			CacheCreationInputTokens: rep.Usage.CacheCreationInputTokens,
			CacheReadInputTokens:     rep.Usage.CacheReadInputTokens,
		},
	}
	if err := emit("message_start", messageStartEvent{Type: "message_start", Message: start}); err != nil {
		return err
	}
	if err := emit("ping", typeEvent{Type: "ping"}); err != nil {
		return err
	}
	for i, b := range rep.Content {
		if err := emit("content_block_start", blockStartEvent{Type: "content_block_start", Index: i, ContentBlock: b.startWire()}); err != nil {
			return err
		}
		for _, d := range deltas(b) {
			if err := backoff.Sleep(ctx, pause); err != nil {
				return err
			}
			if err := emit("content_block_delta", blockDeltaEvent{Type: "content_block_delta", Index: i, Delta: d}); err != nil {
				return err
			}
		}
		if err := emit("content_block_stop", blockStopEvent{Type: "content_block_stop", Index: i}); err != nil {
			return err
		}
	}
	md := messageDeltaEvent{Type: "message_delta", Delta: messageDeltaDelta{StopReason: rep.StopReason}, Usage: rep.Usage}
	if err := emit("message_delta", md); err != nil {
		return err
	}
	return emit("message_stop", typeEvent{Type: "message_stop"})
}

// deltas splits a block into its content_block_delta payloads.
func deltas(b contentBlock) []any {
	var out []any
	if b.Type == "tool_use" {
		for _, p := range jsonPieces(string(b.Input)) {
			out = append(out, inputJSONDelta{Type: "input_json_delta", PartialJSON: p})
		}
		return out
	}
	for _, p := range textPieces(b.Text, wordsPerTextDelta) {
		out = append(out, textDelta{Type: "text_delta", Text: p})
	}
	return out
}

// textPieces splits s into pieces of n words, each keeping the space that
// follows it; the pieces concatenate to s.
func textPieces(s string, n int) []string {
	var out []string
	start, words, inWord := 0, 0, false
	for i, r := range s {
		if unicode.IsSpace(r) {
			inWord = false
			continue
		}
		if !inWord {
			if words == n {
				out = append(out, s[start:i])
				start, words = i, 0
			}
			words++
			inWord = true
		}
	}
	if start < len(s) || len(out) == 0 {
		out = append(out, s[start:])
	}
	return out
}

// jsonPieces splits s at rune boundaries into pieces of at most maxJSONDelta
// bytes, and into at least two when s has two runes or more.
func jsonPieces(s string) []string {
	size := min(maxJSONDelta, (len(s)+1)/2)
	var out []string
	for len(s) > 0 {
		n := min(max(size, 1), len(s))
		for n < len(s) && !utf8.RuneStart(s[n]) {
			n++
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}
