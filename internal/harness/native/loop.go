package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/observe"
	"github.com/talkide/platform/internal/sandbox"
	"github.com/talkide/platform/internal/tools"
)

// agent runs the loop of one turn, or of a sub-agent inside a turn: call the
// model, run the tools it asks for, repeat until it stops asking.
type agent struct {
	h              *Harness
	convID, turnID string
	sessionDir     string
	ws             *tools.Workspace
	system         []anthropic.TextBlockParam
	params         []anthropic.ToolUnionParam
	transcript     harness.Transcript
	jail           *sandbox.Jail         // the processes' sandbox; nil: tools start none
	extra          map[string]tools.Tool // this turn's tools beyond the built-in ones
	extraList      []tools.Tool
	emit           func(contract.Event)
	report         func(contract.Report)
	log            *slog.Logger
	sub            bool // a sub-agent: it cannot start sub-agents of its own

	// lastInput is the prompt size of the latest model call, in tokens
	// (input plus cache reads and writes): what decides compaction.
	lastInput int64
}

func (h *Harness) newAgent(t *harness.Turn, ws *tools.Workspace, log *slog.Logger, extra []tools.Tool) *agent {
	a := &agent{
		h: h, convID: t.ConversationID, turnID: t.TurnID, sessionDir: t.SessionDir, ws: ws,
		system:     h.systemBlocks(ws, false),
		transcript: t.Transcript, emit: t.Emit, report: t.Report, log: log,
		jail: t.Jail,
	}
	a.setTools(extra)
	return a
}

// setTools sets the turn's extra tools and the request's tool definitions:
// the built-in tools, the extra ones, and Task unless this is a sub-agent.
func (a *agent) setTools(extra []tools.Tool) {
	a.extraList = extra
	a.extra = make(map[string]tools.Tool, len(extra))
	defs := append([]map[string]any(nil), a.h.defs...)
	for _, t := range extra {
		a.extra[t.Name()] = t
		defs = append(defs, toolDef(t))
	}
	if !a.sub {
		defs = append(defs, map[string]any{"name": taskToolName, "description": taskDescription, "input_schema": taskSchema})
	}
	a.params = toolParams(defs)
}

// loop runs model calls until the model stops asking for tools. It returns
// the history as it stands at the end.
func (a *agent) loop(ctx context.Context, history []json.RawMessage) (harness.Result, []json.RawMessage, error) {
	var res harness.Result
	a.lastInput = estimateTokens(history)
	for {
		if res.ModelCalls >= a.h.opts.MaxModelCalls {
			return res, history, &harness.TurnError{Code: contract.FailMaxTurns, Message: fmt.Sprintf("the turn reached its limit of %d model calls", a.h.opts.MaxModelCalls)}
		}
		if a.lastInput >= a.h.compactAt() {
			var err error
			if history, err = a.compact(ctx, history); err != nil {
				return res, history, err
			}
		}
		res.ModelCalls++
		msg, err := a.callModel(ctx, history, false)
		if msg != nil {
			raw, merr := json.Marshal(msg.ToParam())
			if merr != nil {
				return res, history, persistErr(merr)
			}
			if err := a.transcript.Append(raw); err != nil {
				return res, history, persistErr(err)
			}
			history = append(history, raw)
		}
		if err != nil {
			return res, history, err
		}
		res.StopReason = string(msg.StopReason)
		uses := toolUses(msg)
		if msg.StopReason != anthropic.StopReasonToolUse || len(uses) == 0 {
			return res, history, nil
		}
		results := a.runTools(ctx, uses)
		raw, _ := json.Marshal(wireMessage{Role: "user", Content: results})
		if err := a.transcript.Append(raw); err != nil {
			return res, history, persistErr(err)
		}
		history = append(history, raw)
		if ctx.Err() != nil {
			return res, history, ctx.Err()
		}
	}
}

// callModel streams one model call, emitting text deltas as they arrive
// (unless quiet). On interruption it returns what had arrived, cut to
// complete text blocks, so the transcript keeps what the user saw.
func (a *agent) callModel(ctx context.Context, history []json.RawMessage, quiet bool) (_ *anthropic.Message, err error) {
	start := time.Now()
	ctx, span := observe.StartModelCall(ctx, a.h.tracer, a.h.opts.Model,
		observe.Conversation.String(a.convID), observe.Turn.String(a.turnID))
	mc := observe.ModelCall{RequestModel: a.h.opts.Model}
	defer func() {
		mc.Duration = time.Since(start)
		if err != nil {
			mc.ErrType = modelErrType(err)
		}
		span.SetAttributes(mc.SpanAttributes()...)
		observe.End(span, err, mc.ErrType)
		a.h.genai.Record(ctx, mc)
	}()
	msgs := make([]anthropic.MessageParam, len(history))
	for i, r := range history {
		msgs[i] = param.Override[anthropic.MessageParam](r)
	}
	// A cache breakpoint on the conversation's tail: the next call reads
	// everything up to here from the cache, so a long conversation pays
	// mostly cache reads. (The others are on the last tool and the system.)
	if n := len(history); n > 0 {
		if tail, err := withCacheControl(history[n-1]); err == nil {
			msgs[n-1] = param.Override[anthropic.MessageParam](tail)
		}
	}
	params := anthropic.MessageNewParams{
		Model:     anthropic.Model(a.h.opts.Model),
		MaxTokens: a.h.opts.MaxTokens,
		System:    a.system,
		Tools:     a.params,
		Messages:  msgs,
	}
	// The conversation travels with the request: the minting transport
	// mints the WorkerToken for it, and the gateway checks that the token
	// is this conversation's.
	opts := append([]option.RequestOption{option.WithHeader(contract.ConversationHeader, a.convID)}, a.h.callOpts...)
	stream := a.h.client.Messages.NewStreaming(ctx, params, opts...)
	defer stream.Close()
	var acc anthropic.Message
	for stream.Next() {
		ev := stream.Current()
		if mc.FirstToken == 0 && ev.Type == "content_block_delta" {
			mc.FirstToken = time.Since(start)
		}
		if err := acc.Accumulate(ev); err != nil {
			return nil, &harness.TurnError{Code: contract.FailModelError, Message: "the model's stream could not be read", Retryable: true, Err: err}
		}
		if !quiet && ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" && ev.Delta.Text != "" {
			a.emit(contract.Event{Kind: contract.KindTextDelta, Text: ev.Delta.Text, Index: int(ev.Index)})
		}
	}
	err = stream.Err()
	mc.ResponseModel, mc.ResponseID = string(acc.Model), acc.ID
	mc.Input, mc.Output = acc.Usage.InputTokens, acc.Usage.OutputTokens
	mc.CacheRead, mc.CacheCreation = acc.Usage.CacheReadInputTokens, acc.Usage.CacheCreationInputTokens
	mc.FinishReason = string(acc.StopReason)
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		if ctx.Err() != nil {
			return partial(&acc), ctx.Err()
		}
		return partial(&acc), mapModelError(err, a.h.opts.MaxRetryWait, time.Now())
	}
	if acc.StopReason == "" {
		return partial(&acc), &harness.TurnError{Code: contract.FailModelError, Message: "the model's stream ended before the message was complete", Retryable: true}
	}
	a.lastInput = acc.Usage.InputTokens + acc.Usage.CacheReadInputTokens + acc.Usage.CacheCreationInputTokens
	if !quiet {
		a.emit(contract.Event{Kind: contract.KindMessage, Text: messageText(&acc)})
	}
	u := contract.Usage{
		Model:                    string(acc.Model),
		InputTokens:              acc.Usage.InputTokens,
		OutputTokens:             acc.Usage.OutputTokens,
		CacheCreationInputTokens: acc.Usage.CacheCreationInputTokens,
		CacheReadInputTokens:     acc.Usage.CacheReadInputTokens,
	}
	a.emit(contract.Event{Kind: contract.KindUsage, Usage: &u})
	a.report(contract.Report{Kind: contract.ReportUsage, IdempotencyKey: "usage-" + acc.ID, Usage: &u, Traceparent: observe.Traceparent(ctx)})
	return &acc, nil
}

// withCacheControl returns a message with a cache breakpoint on its last
// content block; the transcript keeps the message without it.
func withCacheControl(raw json.RawMessage) (json.RawMessage, error) {
	var m struct {
		Role    string            `json:"role"`
		Content []json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &m); err != nil || len(m.Content) == 0 {
		return nil, fmt.Errorf("no content")
	}
	var block map[string]json.RawMessage
	if err := json.Unmarshal(m.Content[len(m.Content)-1], &block); err != nil {
		return nil, err
	}
	block["cache_control"] = json.RawMessage(`{"type":"ephemeral"}`)
	b, err := json.Marshal(block)
	if err != nil {
		return nil, err
	}
	m.Content[len(m.Content)-1] = b
	return json.Marshal(m)
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

// readOnlyTools change nothing, so several of them in one reply run at once.
var readOnlyTools = map[string]bool{"Read": true, "Glob": true, "Grep": true, "LS": true}

// runTools runs the calls and returns their tool_result blocks, one per call
// and in the calls' order. Consecutive read-only calls run concurrently;
// anything that may change the workspace runs alone, in order. Once ctx is
// cancelled the remaining calls are answered as interrupted without running.
func (a *agent) runTools(ctx context.Context, uses []anthropic.ContentBlockUnion) []wireBlock {
	out := make([]wireBlock, len(uses))
	for i := 0; i < len(uses); {
		j := i + 1
		if readOnlyTools[uses[i].Name] {
			for j < len(uses) && readOnlyTools[uses[j].Name] {
				j++
			}
		}
		// Every call of the batch is announced before any runs: one that
		// finished at once would otherwise report its end before the
		// others had started.
		type run struct {
			k     int
			input json.RawMessage
		}
		runs := make([]run, 0, j-i)
		for k := i; k < j; k++ {
			if ctx.Err() != nil {
				out[k] = resultBlocks([]string{uses[k].ID})[0]
				continue
			}
			input := uses[k].Input
			if len(input) == 0 {
				input = json.RawMessage("{}")
			}
			runs = append(runs, run{k, input})
			a.emit(contract.Event{Kind: contract.KindToolStarted, Tool: &contract.ToolEvent{ID: uses[k].ID, Name: uses[k].Name, Input: input}})
		}
		var wg sync.WaitGroup
		for _, r := range runs {
			wg.Go(func() { out[r.k] = a.runOne(ctx, uses[r.k].ID, uses[r.k].Name, r.input) })
		}
		wg.Wait()
		i = j
	}
	return out
}

// runOne runs one call and reports it: tool.finished for the user, a
// tool_use report for the control-plane, a tool_result for the model.
func (a *agent) runOne(ctx context.Context, id, name string, input json.RawMessage) wireBlock {
	start := time.Now()
	// The span names the tool and says how it went; never its input or
	// its output.
	ctx, span := observe.Start(ctx, a.h.tracer, "tool "+name, trace.WithAttributes(observe.Tool.String(name),
		observe.ToolCallID.String(id), observe.Conversation.String(a.convID), observe.Turn.String(a.turnID)))
	res := a.runTool(ctx, id, name, input)
	dur := time.Since(start)
	outcome := "ok"
	if res.IsError {
		outcome = "error"
	}
	span.SetAttributes(observe.ToolOutcome.String(outcome))
	span.End()
	a.emit(contract.Event{Kind: contract.KindToolFinished, Tool: &contract.ToolEvent{
		ID: id, Name: name, Output: res.Output, IsError: res.IsError, DurationMS: dur.Milliseconds(),
	}})
	a.report(contract.Report{Kind: contract.ReportToolUse, IdempotencyKey: "tool-" + id,
		Tool: &contract.ToolReport{ID: id, Name: name, IsError: res.IsError, DurationMS: dur.Milliseconds()}, Traceparent: observe.Traceparent(ctx)})
	content, _ := json.Marshal(res.Output)
	return wireBlock{Type: "tool_result", ToolUseID: id, Content: content, IsError: res.IsError}
}

func (a *agent) runTool(ctx context.Context, id, name string, input json.RawMessage) tools.Result {
	if name == taskToolName && !a.sub {
		return a.runTask(ctx, id, input)
	}
	tool, ok := a.h.tools[name]
	if !ok {
		tool, ok = a.extra[name]
	}
	if !ok {
		return tools.Result{Output: fmt.Sprintf("There is no tool named %q. Available tools: %s.", name, strings.Join(a.toolNames(), ", ")), IsError: true}
	}
	if d := a.h.opts.Policy.Check(name, input, a.ws); !d.Allowed {
		a.log.Info("tool call denied by policy", "tool", name, "rule", d.Rule)
		return tools.Result{Output: d.Message(), IsError: true}
	}
	var stateDir string
	if a.sessionDir != "" {
		stateDir = tools.StateDirOf(a.sessionDir)
	}
	res, err := tool.Run(ctx, tools.Call{
		ID:        id,
		Input:     input,
		Workspace: a.ws,
		StateDir:  stateDir,
		Jail:      a.jail,
		// The conversation names a build's Job.
		Conversation: a.convID,
		Output: tools.StreamCap(MaxStreamedOutput, func(chunk string) {
			a.emit(contract.Event{Kind: contract.KindToolOutput, Tool: &contract.ToolEvent{ID: id, Name: name, Output: chunk}})
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

func (a *agent) toolNames() []string {
	names := make([]string, 0, len(a.h.opts.Tools)+len(a.extraList)+1)
	for _, t := range a.h.opts.Tools {
		names = append(names, t.Name())
	}
	for _, t := range a.extraList {
		names = append(names, t.Name())
	}
	if !a.sub {
		names = append(names, taskToolName)
	}
	return names
}

// modelErrType is the kind of a model call's failure, for its span and
// the duration metric: the turn failure's code, or the context's.
func modelErrType(err error) string {
	if errors.Is(err, context.Canceled) {
		return "canceled"
	}
	if te, ok := errors.AsType[*harness.TurnError](err); ok {
		return te.Code
	}
	return "error"
}
