// Package native is the default harness: an agent loop in-process on the
// official Anthropic Go SDK. It streams the model's reply, runs the tools the
// model asks for inside the conversation's workspace, and keeps the
// conversation in the session's transcript so a restarted worker resumes it.
package native

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/tools"
)

// Name is the harness's name in session metadata.
const Name = "native"

//go:embed prompts/mara.md
var defaultSystemPrompt string

// Defaults.
const (
	DefaultModel         = "claude-sonnet-5-5"
	DefaultMaxTokens     = 16384
	DefaultMaxModelCalls = 100
)

// Options configure the harness; the zero value of each field means its
// default.
type Options struct {
	Model         string
	MaxTokens     int64
	MaxModelCalls int // the turn's limit on model calls ("max_turns")
	// System is Mara's system prompt; empty means the embedded prompts/mara.md.
	System string
	// Tools are offered to the model; nil means tools.Default(nil).
	Tools []tools.Tool
	// Policy is checked before every tool call; a denied call is answered
	// with an error result naming the rule, without running. Nil allows
	// every call.
	Policy *tools.Policy
	Logger *slog.Logger
}

// Harness runs turns with an Anthropic client.
type Harness struct {
	client anthropic.Client
	opts   Options
	tools  map[string]tools.Tool
	params []anthropic.ToolUnionParam
}

// New returns the harness. The client must already point at the gateway with
// a minting transport; the harness holds no credential.
func New(client anthropic.Client, opts *Options) *Harness {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Model == "" {
		o.Model = DefaultModel
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = DefaultMaxTokens
	}
	if o.MaxModelCalls <= 0 {
		o.MaxModelCalls = DefaultMaxModelCalls
	}
	if o.System == "" {
		o.System = defaultSystemPrompt
	}
	if o.Tools == nil {
		o.Tools = tools.Default(nil)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Harness{client: client, opts: o, tools: make(map[string]tools.Tool)}
	for i, t := range o.Tools {
		h.tools[t.Name()] = t
		def := map[string]any{"name": t.Name(), "description": t.Description(), "input_schema": t.InputSchema()}
		if i == len(o.Tools)-1 {
			// One cache breakpoint after the last tool caches system + tools.
			def["cache_control"] = map[string]string{"type": "ephemeral"}
		}
		raw, err := json.Marshal(def)
		if err != nil {
			panic(fmt.Sprintf("native: tool %s has an unmarshalable schema: %v", t.Name(), err))
		}
		h.params = append(h.params, param.Override[anthropic.ToolUnionParam](json.RawMessage(raw)))
	}
	return h
}

// Name implements harness.Harness.
func (h *Harness) Name() string { return Name }

// RunTurn implements harness.Harness.
func (h *Harness) RunTurn(ctx context.Context, t *harness.Turn) (harness.Result, error) {
	log := h.opts.Logger.With("conversation", t.ConversationID, "turn", t.TurnID)
	records, err := t.Transcript.Records()
	if err != nil {
		return harness.Result{}, &harness.TurnError{Code: contract.FailInternal, Message: "the session transcript could not be read", Err: err}
	}
	history, fixes, err := repair(records)
	if err != nil {
		return harness.Result{}, &harness.TurnError{Code: contract.FailInternal, Message: "the session transcript is corrupt", Err: err}
	}
	for _, f := range fixes {
		if err := t.Transcript.Append(f); err != nil {
			return harness.Result{}, persistErr(err)
		}
	}
	if len(fixes) > 0 {
		log.Info("transcript repaired: answered tool calls left open by an interruption")
	}
	ws, err := tools.NewWorkspace(t.Workspace)
	if err != nil {
		return harness.Result{}, &harness.TurnError{Code: contract.FailInternal, Message: "the conversation's workspace could not be opened", Err: err}
	}

	user, _ := json.Marshal(wireMessage{Role: "user", Content: []wireBlock{{Type: "text", Text: t.Text}}})
	if err := t.Transcript.Append(user); err != nil {
		return harness.Result{}, persistErr(err)
	}
	history = append(history, user)
	if history, err = mergeUserRuns(history); err != nil {
		return harness.Result{}, persistErr(err)
	}

	var res harness.Result
	for {
		if res.ModelCalls >= h.opts.MaxModelCalls {
			return res, &harness.TurnError{Code: contract.FailMaxTurns, Message: fmt.Sprintf("the turn reached its limit of %d model calls", h.opts.MaxModelCalls)}
		}
		res.ModelCalls++
		msg, err := h.callModel(ctx, t, history)
		if msg != nil {
			raw, merr := json.Marshal(msg.ToParam())
			if merr != nil {
				return res, persistErr(merr)
			}
			if err := t.Transcript.Append(raw); err != nil {
				return res, persistErr(err)
			}
			history = append(history, raw)
		}
		if err != nil {
			return res, err
		}
		res.StopReason = string(msg.StopReason)
		uses := toolUses(msg)
		if msg.StopReason != anthropic.StopReasonToolUse || len(uses) == 0 {
			return res, nil
		}
		results := h.runTools(ctx, t, ws, uses)
		raw, _ := json.Marshal(wireMessage{Role: "user", Content: results})
		if err := t.Transcript.Append(raw); err != nil {
			return res, persistErr(err)
		}
		history = append(history, raw)
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
	}
}

// callModel streams one model call, emitting text deltas as they arrive. On
// interruption it returns what had arrived, cut to complete text blocks, so
// the transcript keeps what the user saw.
func (h *Harness) callModel(ctx context.Context, t *harness.Turn, history []json.RawMessage) (*anthropic.Message, error) {
	msgs := make([]anthropic.MessageParam, len(history))
	for i, r := range history {
		msgs[i] = param.Override[anthropic.MessageParam](r)
	}
	params := anthropic.MessageNewParams{
		Model:     anthropic.Model(h.opts.Model),
		MaxTokens: h.opts.MaxTokens,
		System: []anthropic.TextBlockParam{{
			Text:         h.opts.System,
			CacheControl: anthropic.NewCacheControlEphemeralParam(),
		}},
		Tools:    h.params,
		Messages: msgs,
	}
	stream := h.client.Messages.NewStreaming(ctx, params)
	defer stream.Close()
	var acc anthropic.Message
	for stream.Next() {
		ev := stream.Current()
		if err := acc.Accumulate(ev); err != nil {
			return nil, &harness.TurnError{Code: contract.FailModelError, Message: "the model's stream could not be read", Retryable: true, Err: err}
		}
		if ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" && ev.Delta.Text != "" {
			t.Emit(contract.Event{Kind: contract.KindTextDelta, Text: ev.Delta.Text, Index: int(ev.Index)})
		}
	}
	err := stream.Err()
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		if ctx.Err() != nil {
			return partial(&acc), ctx.Err()
		}
		return partial(&acc), mapModelError(err)
	}
	if acc.StopReason == "" {
		return partial(&acc), &harness.TurnError{Code: contract.FailModelError, Message: "the model's stream ended before the message was complete", Retryable: true}
	}
	text := messageText(&acc)
	t.Emit(contract.Event{Kind: contract.KindMessage, Text: text})
	u := contract.Usage{
		Model:                    string(acc.Model),
		InputTokens:              acc.Usage.InputTokens,
		OutputTokens:             acc.Usage.OutputTokens,
		CacheCreationInputTokens: acc.Usage.CacheCreationInputTokens,
		CacheReadInputTokens:     acc.Usage.CacheReadInputTokens,
	}
	t.Emit(contract.Event{Kind: contract.KindUsage, Usage: &u})
	t.Report(contract.Report{Kind: contract.ReportUsage, IdempotencyKey: "usage-" + acc.ID, Usage: &u})
	return &acc, nil
}

// partial keeps the complete text blocks of an interrupted message, or
// returns nil when nothing worth keeping arrived. Tool calls whose input may
// be incomplete are dropped: they never ran.
func partial(m *anthropic.Message) *anthropic.Message {
	var keep []anthropic.ContentBlockUnion
	for _, b := range m.Content {
		if b.Type == "text" && strings.TrimSpace(b.Text) != "" {
			// Accumulate refreshes a block's wire JSON, which ToParam reads,
			// only at content_block_stop: a block cut off mid-stream would
			// be sent back as "" (an empty text block the API rejects).
			// Rebuild it from the text that did arrive.
			raw, err := json.Marshal(wireBlock{Type: "text", Text: b.Text})
			var nb anthropic.ContentBlockUnion
			if err != nil || nb.UnmarshalJSON(raw) != nil {
				continue
			}
			keep = append(keep, nb)
		}
	}
	if len(keep) == 0 {
		return nil
	}
	out := *m
	out.Content = keep
	out.StopReason = ""
	return &out
}

func messageText(m *anthropic.Message) string {
	var b strings.Builder
	for _, c := range m.Content {
		if c.Type == "text" {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

func toolUses(m *anthropic.Message) []anthropic.ContentBlockUnion {
	var out []anthropic.ContentBlockUnion
	for _, c := range m.Content {
		if c.Type == "tool_use" {
			out = append(out, c)
		}
	}
	return out
}

// runTools runs the calls in order and returns their tool_result blocks, one
// per call. Once ctx is cancelled the remaining calls are answered as
// interrupted without running.
func (h *Harness) runTools(ctx context.Context, t *harness.Turn, ws *tools.Workspace, uses []anthropic.ContentBlockUnion) []wireBlock {
	out := make([]wireBlock, 0, len(uses))
	for _, u := range uses {
		if ctx.Err() != nil {
			out = append(out, resultBlocks([]string{u.ID})...)
			continue
		}
		input := u.Input
		if len(input) == 0 {
			input = json.RawMessage("{}")
		}
		t.Emit(contract.Event{Kind: contract.KindToolStarted, Tool: &contract.ToolEvent{ID: u.ID, Name: u.Name, Input: input}})
		start := time.Now()
		res := h.runTool(ctx, t, ws, u.ID, u.Name, input)
		dur := time.Since(start)
		t.Emit(contract.Event{Kind: contract.KindToolFinished, Tool: &contract.ToolEvent{
			ID: u.ID, Name: u.Name, Output: res.Output, IsError: res.IsError, DurationMS: dur.Milliseconds(),
		}})
		t.Report(contract.Report{Kind: contract.ReportToolUse, IdempotencyKey: "tool-" + u.ID,
			Tool: &contract.ToolReport{ID: u.ID, Name: u.Name, IsError: res.IsError, DurationMS: dur.Milliseconds()}})
		content, _ := json.Marshal(res.Output)
		out = append(out, wireBlock{Type: "tool_result", ToolUseID: u.ID, Content: content, IsError: res.IsError})
	}
	return out
}

func (h *Harness) runTool(ctx context.Context, t *harness.Turn, ws *tools.Workspace, id, name string, input json.RawMessage) tools.Result {
	tool, ok := h.tools[name]
	if !ok {
		return tools.Result{Output: fmt.Sprintf("There is no tool named %q. Available tools: %s.", name, strings.Join(h.toolNames(), ", ")), IsError: true}
	}
	if d := h.opts.Policy.Check(name, input, ws); !d.Allowed {
		h.opts.Logger.Info("tool call denied by policy", "conversation", t.ConversationID, "turn", t.TurnID, "tool", name, "rule", d.Rule)
		return tools.Result{Output: d.Message(), IsError: true}
	}
	var stateDir string
	if t.SessionDir != "" {
		stateDir = filepath.Join(t.SessionDir, "tools")
	}
	res, err := tool.Run(ctx, tools.Call{
		ID:        id,
		Input:     input,
		Workspace: ws,
		StateDir:  stateDir,
		Output: streamCap(MaxStreamedOutput, func(chunk string) {
			t.Emit(contract.Event{Kind: contract.KindToolOutput, Tool: &contract.ToolEvent{ID: id, Name: name, Output: chunk}})
		}),
	})
	if err != nil {
		if ctx.Err() != nil {
			return tools.Result{Output: interruptedText, IsError: true}
		}
		return tools.Result{Output: fmt.Sprintf("The tool could not run: %v", err), IsError: true}
	}
	return res
}

func (h *Harness) toolNames() []string {
	names := make([]string, 0, len(h.opts.Tools))
	for _, t := range h.opts.Tools {
		names = append(names, t.Name())
	}
	return names
}

// MaxStreamedOutput bounds the bytes of one tool call's output streamed as
// tool.output events: every event is durable and replayed to every client,
// so a command printing gigabytes must not become gigabytes of event log.
// The tool's result (capped too, kept whole on the session volume) still
// shows how the output ended.
const MaxStreamedOutput = 1 << 20

// streamCap passes chunks to emit until max bytes have passed, then one
// note, then nothing.
func streamCap(max int, emit func(string)) func(string) {
	sent, stopped := 0, false
	return func(chunk string) {
		if stopped {
			return
		}
		if sent+len(chunk) > max {
			if rest := max - sent; rest > 0 {
				emit(chunk[:rest])
			}
			emit(fmt.Sprintf("\n[live output stopped after %d bytes; the tool's result shows how it ended]\n", max))
			stopped = true
			return
		}
		sent += len(chunk)
		emit(chunk)
	}
}

// mapModelError turns an SDK error into a turn failure with a code and
// whether a later retry can help. The SDK has already retried 429 and 5xx
// with backoff honouring retry-after.
func mapModelError(err error) error {
	var apiErr *anthropic.Error
	if errors.As(err, &apiErr) {
		te := &harness.TurnError{HTTPStatus: apiErr.StatusCode, Err: err}
		switch {
		case apiErr.StatusCode == http.StatusTooManyRequests:
			te.Code, te.Message, te.Retryable = contract.FailRateLimited, "the model is rate limited or the budget is exhausted; try again later", true
		case apiErr.StatusCode == 529 || apiErr.Type() == "overloaded_error":
			te.Code, te.Message, te.Retryable = contract.FailOverloaded, "the model is overloaded; try again shortly", true
		case apiErr.StatusCode == http.StatusUnauthorized || apiErr.StatusCode == http.StatusForbidden:
			te.Code, te.Message = contract.FailAuth, "the gateway refused the worker's credentials"
		case apiErr.StatusCode >= 500:
			te.Code, te.Message, te.Retryable = contract.FailModelError, "the model API failed", true
		default:
			te.Code, te.Message = contract.FailModelError, "the model API rejected the request: "+apiErr.Message
		}
		return te
	}
	return &harness.TurnError{Code: contract.FailModelError, Message: "the model could not be reached", Retryable: true, Err: err}
}

func persistErr(err error) error {
	return &harness.TurnError{Code: contract.FailInternal, Message: "the session could not be saved", Retryable: true, Err: err}
}
