package anthropicsim_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/anthropicsim"
)

const key = "sk-ant-sim-sdk-test"

// newClient starts a simulator on loopback and returns an SDK client for it.
// Retries are off unless opts turn them on.
func newClient(t *testing.T, opts ...option.RequestOption) (*anthropicsim.Simulator, anthropic.Client) {
	t.Helper()
	sim := anthropicsim.New(key, nil)
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	base := []option.RequestOption{option.WithBaseURL(srv.URL), option.WithAPIKey(key), option.WithMaxRetries(0)}
	return sim, anthropic.NewClient(append(base, opts...)...)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

var weatherTool = anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
	Name:        "get_weather",
	Description: anthropic.String("Current weather for a city"),
	InputSchema: anthropic.ToolInputSchemaParam{
		Properties: map[string]any{"city": map[string]any{"type": "string"}},
		Required:   []string{"city"},
	},
}}

func params(msgs ...anthropic.MessageParam) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     anthropic.Model("claude-sim"),
		MaxTokens: 1024,
		System:    []anthropic.TextBlockParam{{Text: "You are a test."}},
		Tools:     []anthropic.ToolUnionParam{weatherTool},
		Messages:  msgs,
	}
}

// streamed runs p as a stream and accumulates it with the SDK.
func streamed(t *testing.T, client anthropic.Client, p anthropic.MessageNewParams) anthropic.Message {
	t.Helper()
	stream := client.Messages.NewStreaming(ctx(t), p)
	defer stream.Close()
	var msg anthropic.Message
	var events []string
	for stream.Next() {
		ev := stream.Current()
		events = append(events, ev.Type)
		if err := msg.Accumulate(ev); err != nil {
			t.Fatalf("Accumulate %s: %v", ev.Type, err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v (after %v)", err, events)
	}
	if events[0] != "message_start" || events[len(events)-1] != "message_stop" {
		t.Errorf("events %v", events)
	}
	return msg
}

// shape is the comparable part of a Message.
type shape struct {
	Model, StopReason string
	Blocks            []string // "text:<text>" or "tool_use:<name>:<id>:<input>"
	Usage             [4]int64
}

func shapeOf(m anthropic.Message) shape {
	s := shape{Model: string(m.Model), StopReason: string(m.StopReason),
		Usage: [4]int64{m.Usage.InputTokens, m.Usage.OutputTokens, m.Usage.CacheCreationInputTokens, m.Usage.CacheReadInputTokens}}
	for _, b := range m.Content {
		switch v := b.AsAny().(type) {
		case anthropic.TextBlock:
			s.Blocks = append(s.Blocks, "text:"+v.Text)
		case anthropic.ToolUseBlock:
			s.Blocks = append(s.Blocks, "tool_use:"+v.Name+":"+v.ID+":"+string(v.Input))
		default:
			s.Blocks = append(s.Blocks, "other:"+b.Type)
		}
	}
	return s
}

func TestSDKNew(t *testing.T) {
	_, client := newClient(t)
	msg, err := client.Messages.New(ctx(t), params(anthropic.NewUserMessage(anthropic.NewTextBlock("hello <world>"))))
	if err != nil {
		t.Fatal(err)
	}
	want := shape{Model: "claude-sim", StopReason: "end_turn", Blocks: []string{"text:[simulator] messages=1 you said: hello <world>"}}
	got := shapeOf(*msg)
	want.Usage = got.Usage
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(msg.ID, "msg_sim_") || got.Usage[0] < 1 || got.Usage[1] < 1 {
		t.Errorf("id %q usage %v", msg.ID, got.Usage)
	}
}

func TestSDKStreamingEqualsNew(t *testing.T) {
	tests := map[string]string{
		"text":      "a longer prompt so that the text arrives in several deltas, one two three four five",
		"tool_use":  `checking [[tool:get_weather {"city":"Paris","details":{"units":["c","f"],"note":"]] ok"}}]]`,
		"two tools": `[[tool:get_weather {"city":"Oslo"}]][[tool:get_weather {"city":"Rome"}]]`,
	}
	for name, text := range tests {
		t.Run(name, func(t *testing.T) {
			_, client := newClient(t)
			p := params(anthropic.NewUserMessage(anthropic.NewTextBlock(text)))
			plain, err := client.Messages.New(ctx(t), p)
			if err != nil {
				t.Fatal(err)
			}
			got := streamed(t, client, p)
			// The streamed body carries "stream":true, so it counts a few
			// more input tokens; everything else must agree.
			want := shapeOf(*plain)
			gotShape := shapeOf(got)
			want.Usage[0] = gotShape.Usage[0]
			if diff := cmp.Diff(want, gotShape); diff != "" {
				t.Errorf("streamed vs New (-want +got):\n%s", diff)
			}
			if gotShape.Usage[0] < shapeOf(*plain).Usage[0] {
				t.Errorf("streamed input tokens %d < %d", gotShape.Usage[0], shapeOf(*plain).Usage[0])
			}
		})
	}
}

// TestSDKToolRoundTrip runs a whole tool turn: the simulator asks for a tool,
// the client answers with a tool_result carrying the history, and the
// simulator quotes the result.
func TestSDKToolRoundTrip(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "New", true: "NewStreaming"}[stream], func(t *testing.T) {
			sim, client := newClient(t)
			send := func(p anthropic.MessageNewParams) anthropic.Message {
				if stream {
					return streamed(t, client, p)
				}
				m, err := client.Messages.New(ctx(t), p)
				if err != nil {
					t.Fatal(err)
				}
				return *m
			}
			history := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(`What's the weather? [[tool:get_weather {"city":"Paris"}]]`))}
			first := send(params(history...))
			if first.StopReason != anthropic.StopReasonToolUse || len(first.Content) != 2 {
				t.Fatalf("first reply %+v", shapeOf(first))
			}
			if txt := first.Content[0].AsText().Text; txt != "[simulator] What's the weather?" {
				t.Errorf("lead text %q", txt)
			}
			use := first.Content[1].AsToolUse()
			var input struct{ City string }
			if err := json.Unmarshal(use.Input, &input); err != nil || use.Name != "get_weather" || input.City != "Paris" || !strings.HasPrefix(use.ID, "toolu_sim_") {
				t.Fatalf("tool_use %+v (%v)", use, err)
			}

			history = append(history, first.ToParam(),
				anthropic.NewUserMessage(anthropic.NewToolResultBlock(use.ID, "18°C and sunny in "+input.City, false)))
			second := send(params(history...))
			want := []string{"text:[simulator] tool results: 1) 18°C and sunny in Paris"}
			if diff := cmp.Diff(want, shapeOf(second).Blocks); diff != "" {
				t.Errorf("second reply (-want +got):\n%s", diff)
			}

			reqs := sim.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests recorded", len(reqs))
			}
			var last struct {
				Messages []struct {
					Role    string `json:"role"`
					Content []struct {
						Type      string `json:"type"`
						ID        string `json:"id"`
						ToolUseID string `json:"tool_use_id"`
					} `json:"content"`
				} `json:"messages"`
			}
			if err := json.Unmarshal(reqs[1], &last); err != nil {
				t.Fatal(err)
			}
			if n := len(last.Messages); n != 3 || last.Messages[1].Role != "assistant" ||
				last.Messages[1].Content[1].ID != use.ID || last.Messages[2].Content[0].ToolUseID != use.ID {
				t.Errorf("second request did not carry the full history: %s", reqs[1])
			}
		})
	}
}

func TestSDKToolNotOffered(t *testing.T) {
	_, client := newClient(t)
	p := params(anthropic.NewUserMessage(anthropic.NewTextBlock(`[[tool:delete_everything {}]]`)))
	msg, err := client.Messages.New(ctx(t), p)
	if err != nil {
		t.Fatal(err)
	}
	if msg.StopReason != anthropic.StopReasonEndTurn || !strings.Contains(msg.Content[0].AsText().Text, "not offered") {
		t.Errorf("reply %+v", shapeOf(*msg))
	}
}

func TestSDKTypedErrors(t *testing.T) {
	tests := map[int]string{429: "rate_limit_error", 529: "overloaded_error", 500: "api_error", 400: "invalid_request_error", 403: "permission_error"}
	for status, wantType := range tests {
		t.Run(wantType, func(t *testing.T) {
			_, client := newClient(t)
			p := params(anthropic.NewUserMessage(anthropic.NewTextBlock("[[error:" + itoa(status) + "]]")))
			for _, stream := range []bool{false, true} {
				var err error
				if stream {
					s := client.Messages.NewStreaming(ctx(t), p)
					for s.Next() {
					}
					err = s.Err()
					s.Close()
				} else {
					_, err = client.Messages.New(ctx(t), p)
				}
				var apiErr *anthropic.Error
				if !errors.As(err, &apiErr) {
					t.Fatalf("stream=%v: error %T %v, want *anthropic.Error", stream, err, err)
				}
				if apiErr.StatusCode != status || string(apiErr.Type()) != wantType || !strings.HasPrefix(apiErr.RequestID, "req_sim_") {
					t.Errorf("stream=%v: status %d type %q request id %q", stream, apiErr.StatusCode, apiErr.Type(), apiErr.RequestID)
				}
				if status == 429 && apiErr.Response.Header.Get("retry-after") != "1" {
					t.Errorf("retry-after %q", apiErr.Response.Header.Get("retry-after"))
				}
			}
		})
	}
}

func TestSDKBadKey(t *testing.T) {
	_, client := newClient(t, option.WithAPIKey("sk-wrong"))
	_, err := client.Messages.New(ctx(t), params(anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))))
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Type() != "authentication_error" {
		t.Fatalf("error %v", err)
	}
}

// TestSDKRetriesAfter429 lets the SDK retry once: it honours retry-after: 1,
// so this takes about a second.
func TestSDKRetriesAfter429(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for retry-after")
	}
	sim, client := newClient(t, option.WithMaxRetries(1))
	_, err := client.Messages.New(ctx(t), params(anthropic.NewUserMessage(anthropic.NewTextBlock("[[error:429]]"))))
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 {
		t.Fatalf("error %v", err)
	}
	if n := len(sim.Requests()); n != 2 {
		t.Errorf("%d requests, want 2 (one retry)", n)
	}
}

func TestSDKCountTokens(t *testing.T) {
	sim, client := newClient(t)
	res, err := client.Messages.CountTokens(ctx(t), anthropic.MessageCountTokensParams{
		Model:    anthropic.Model("claude-sim"),
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("count me"))},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.InputTokens < 1 {
		t.Errorf("input_tokens %d", res.InputTokens)
	}
	if len(sim.Requests()) != 0 {
		t.Error("count_tokens recorded as a messages request")
	}
}

func TestSDKCacheControl(t *testing.T) {
	_, client := newClient(t)
	p := params(anthropic.NewUserMessage(anthropic.NewTextBlock("hi")))
	p.System = []anthropic.TextBlockParam{{Text: "a long and stable system prompt", CacheControl: anthropic.NewCacheControlEphemeralParam()}}
	first, err := client.Messages.New(ctx(t), p)
	if err != nil {
		t.Fatal(err)
	}
	second := streamed(t, client, p)
	if first.Usage.CacheCreationInputTokens == 0 || first.Usage.CacheReadInputTokens != 0 {
		t.Errorf("first usage %+v", first.Usage)
	}
	if second.Usage.CacheReadInputTokens != first.Usage.CacheCreationInputTokens || second.Usage.CacheCreationInputTokens != 0 {
		t.Errorf("second usage %+v, first %+v", second.Usage, first.Usage)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
