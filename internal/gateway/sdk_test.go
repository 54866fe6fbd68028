// The official Anthropic Go SDK, with a minted WorkerToken, against the
// gateway in front of a canned upstream.

package gateway

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// sdkClient is an SDK client that reaches the upstream only through the
// gateway, with a WorkerToken as its bearer credential.
func sdkClient(h *harness, token, conversation string) anthropic.Client {
	return anthropic.NewClient(
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(strings.TrimSuffix(h.url, Prefix)+Prefix),
		option.WithAuthToken(token),
		option.WithHeader(ConversationHeader, conversation),
		option.WithHTTPClient(http.DefaultClient),
		option.WithMaxRetries(0),
	)
}

var sdkParams = anthropic.MessageNewParams{
	Model:     "claude-req-model",
	MaxTokens: 64,
	Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hi"))},
}

func TestSDKMessage(t *testing.T) {
	h := newHarness(t, fakeAnthropic(), nil)
	client := sdkClient(h, h.mint(convA), convA.ID)

	msg, err := client.Messages.New(t.Context(), sdkParams)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Model != testModel || len(msg.Content) != 1 || msg.Content[0].Text != "Hello!" ||
		msg.Usage.InputTokens != 12 || msg.Usage.OutputTokens != 6 {
		t.Errorf("got %+v", msg)
	}
	checkRecord(t, recordOf(convA, 200, false, cannedJSONUsage), h.recordFor(t))
}

func TestSDKStream(t *testing.T) {
	h := newHarness(t, fakeAnthropic(), nil)
	client := sdkClient(h, h.mint(convA), convA.ID)

	stream := client.Messages.NewStreaming(t.Context(), sdkParams)
	var msg anthropic.Message
	var events int
	for stream.Next() {
		events++
		if err := msg.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	// The SDK does not surface the ping event.
	if events != len(cannedEvents)-1 || msg.Model != testModel || len(msg.Content) != 1 ||
		msg.Content[0].Text != "Hello world" || msg.Usage.OutputTokens != 15 || msg.Usage.InputTokens != 25 {
		t.Errorf("%d events, message %+v", events, msg)
	}
	checkRecord(t, recordOf(convA, 200, true, cannedStreamUsage), h.recordFor(t))
}

func TestSDKCountTokens(t *testing.T) {
	h := newHarness(t, fakeAnthropic(), nil)
	client := sdkClient(h, h.mint(convB), convB.ID)
	n, err := client.Messages.CountTokens(t.Context(), anthropic.MessageCountTokensParams{
		Model:    sdkParams.Model,
		Messages: sdkParams.Messages,
	})
	if err != nil {
		t.Fatal(err)
	}
	if n.InputTokens != 42 {
		t.Errorf("input tokens = %d, want 42", n.InputTokens)
	}
}

// TestSDKErrors: the SDK understands the gateway's own errors.
func TestSDKErrors(t *testing.T) {
	h := newHarness(t, fakeAnthropic(), nil)
	tok := h.mint(convA)
	tests := map[string]struct {
		client  anthropic.Client
		status  int
		errType string
	}{
		"bad token":          {sdkClient(h, tok[:len(tok)-4]+"AAAA", convA.ID), 401, errAuthentication},
		"other convers.":     {sdkClient(h, tok, convB.ID), 403, errPermission},
		"bad conversation":   {sdkClient(h, tok, "no/slash"), 400, errInvalidRequest},
		"another tenant-env": {sdkClient(h, h.mint(convC), convC.ID), 200, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := tc.client.Messages.New(t.Context(), sdkParams)
			if tc.status == 200 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			apiErr, ok := errors.AsType[*anthropic.Error](err)
			if !ok {
				t.Fatalf("err = %v, want an *anthropic.Error", err)
			}
			if apiErr.StatusCode != tc.status || string(apiErr.Type()) != tc.errType || apiErr.Message == "" {
				t.Errorf("got %d %q %q, want %d %q", apiErr.StatusCode, apiErr.Type(), apiErr.Message, tc.status, tc.errType)
			}
			if strings.Contains(err.Error(), tok) {
				t.Error("the error shows the token")
			}
		})
	}
}
