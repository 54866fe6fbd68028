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
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/observe"
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
	// ToolSources offer more tools per turn (MCP servers); a source that
	// fails is reported to the user as a notice and the turn goes on
	// without its tools.
	ToolSources []ToolSource
	// ContextWindow is the model's context window in tokens;
	// default DefaultContextWindow.
	ContextWindow int64
	// CompactAt is the fraction of the window at which the history is
	// compacted; default DefaultCompactAt.
	CompactAt float64
	// MaxRetryWait is the longest Retry-After (or retry-after-ms) the SDK
	// may wait out before retrying a model call; a response asking for
	// longer ends the turn at once with its failure (retry.go). Default
	// DefaultMaxRetryWait.
	MaxRetryWait time.Duration
	Logger       *slog.Logger
	// TracerProvider, when set, makes a span of each model call (with the
	// GenAI attributes) and each tool call, under the turn's span; nil:
	// none.
	TracerProvider trace.TracerProvider
	// MeterProvider, when set, records the GenAI client metrics of each
	// model call; nil: none.
	MeterProvider metric.MeterProvider
}

// Harness runs turns with an Anthropic client.
type Harness struct {
	client anthropic.Client
	opts   Options
	tools  map[string]tools.Tool
	// defs are the built-in tools' definitions, without Task.
	defs []map[string]any
	// callOpts go with every model call: the bound on the SDK's retries.
	callOpts []option.RequestOption
	tracer   trace.Tracer          // nil: tracing off
	genai    *observe.GenAIMetrics // nil: no GenAI metrics
}

// ToolSource offers tools for one turn, e.g. those of the MCP servers a
// conversation uses. Its errors are shown to the user, so they must say
// what failed without secrets.
type ToolSource interface {
	Tools(ctx context.Context, t *harness.Turn) ([]tools.Tool, error)
}

// New returns the harness. The client must already point at the gateway with
// a minting transport; the harness holds no credential. It names the turn's
// conversation on each of its requests (contract.ConversationHeader), which
// the transport mints for.
func New(client anthropic.Client, opts *Options) *Harness {
	o := defaults.Copy(opts)
	defaults.IfZero(&o.Model, DefaultModel)
	defaults.IfNotPositive(&o.MaxTokens, DefaultMaxTokens)
	defaults.IfNotPositive(&o.MaxModelCalls, DefaultMaxModelCalls)
	defaults.IfZero(&o.System, defaultSystemPrompt)
	if o.Tools == nil {
		o.Tools = tools.Default(nil)
	}
	defaults.Logger(&o.Logger)
	defaults.IfNotPositive(&o.ContextWindow, DefaultContextWindow)
	if o.CompactAt <= 0 || o.CompactAt >= 1 {
		o.CompactAt = DefaultCompactAt
	}
	defaults.IfNotPositive(&o.MaxRetryWait, DefaultMaxRetryWait)
	h := &Harness{client: client, opts: o, tools: make(map[string]tools.Tool),
		callOpts: []option.RequestOption{option.WithMiddleware(boundRetries(o.MaxRetryWait, time.Now))},
		tracer:   observe.Tracer(o.TracerProvider, "harness/native"),
		genai:    observe.NewGenAIMetrics(o.MeterProvider)}
	for _, t := range o.Tools {
		h.tools[t.Name()] = t
		h.defs = append(h.defs, toolDef(t))
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

	user, _ := json.Marshal(wireMessage{Role: "user", Content: userBlocks(t, ws, log)})
	if err := t.Transcript.Append(user); err != nil {
		return harness.Result{}, persistErr(err)
	}
	history = append(history, user)
	if history, err = mergeUserRuns(history); err != nil {
		return harness.Result{}, persistErr(err)
	}
	a := h.newAgent(t, ws, log, h.turnTools(ctx, t, log))
	res, _, err := a.loop(ctx, history)
	return res, err
}

func toolDef(t tools.Tool) map[string]any {
	return map[string]any{"name": t.Name(), "description": t.Description(), "input_schema": t.InputSchema()}
}

// toolParams turns tool definitions into request parameters, with one cache
// breakpoint after the last tool, which caches the tools.
func toolParams(defs []map[string]any) []anthropic.ToolUnionParam {
	out := make([]anthropic.ToolUnionParam, len(defs))
	for i, def := range defs {
		d := make(map[string]any, len(def)+1)
		for k, v := range def {
			d[k] = v
		}
		if i == len(defs)-1 {
			d["cache_control"] = map[string]string{"type": "ephemeral"}
		}
		raw, err := json.Marshal(d)
		if err != nil {
			panic(fmt.Sprintf("native: tool %v has an unmarshalable schema: %v", def["name"], err))
		}
		out[i] = param.Override[anthropic.ToolUnionParam](json.RawMessage(raw))
	}
	return out
}

// turnTools collects the tools the sources offer for this turn. A name
// already taken (by a built-in tool or an earlier source) is skipped.
func (h *Harness) turnTools(ctx context.Context, t *harness.Turn, log *slog.Logger) []tools.Tool {
	var out []tools.Tool
	taken := map[string]bool{taskToolName: true}
	for name := range h.tools {
		taken[name] = true
	}
	for _, src := range h.opts.ToolSources {
		ts, err := src.Tools(ctx, t)
		if err != nil {
			log.Warn("a tool source failed; the turn goes on without its tools", "err", err)
			t.Emit(contract.Event{Kind: contract.KindNotice, Text: "some tools are unavailable this turn: " + err.Error()})
		}
		for _, tool := range ts {
			if taken[tool.Name()] {
				log.Warn("a tool source offered a name already taken; skipped", "tool", tool.Name())
				continue
			}
			taken[tool.Name()] = true
			out = append(out, tool)
		}
	}
	return out
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

// MaxStreamedOutput bounds the bytes of one tool call's output streamed as
// tool.output events: every event is durable and replayed to every client,
// so a command printing gigabytes must not become gigabytes of event log.
// The tool's result (capped too, kept whole on the session volume) still
// shows how the output ended.
const MaxStreamedOutput = 1 << 20

// mapModelError turns an SDK error into a turn failure with a code and
// whether a later retry can help. The SDK has already retried 429, 529 and
// 5xx with backoff, waiting out a Retry-After of up to maxWait; one that
// asked for longer comes here at once (boundRetries), and the failure says
// how long it asked for.
func mapModelError(err error, maxWait time.Duration, now time.Time) error {
	var apiErr *anthropic.Error
	if errors.As(err, &apiErr) {
		if te := budgetFailure(apiErr); te != nil {
			return te
		}
		te := &harness.TurnError{HTTPStatus: apiErr.StatusCode, Err: err}
		// The wait the API asked for, when it was too long to wait out.
		var later string
		if apiErr.Response != nil {
			if wait, ok := retryAfter(apiErr.Response.Header, now); ok && wait > maxWait {
				later = fmt.Sprintf("; it asks to wait %s, until %s, before a retry", wait.Round(time.Second), now.Add(wait).UTC().Format(time.RFC3339))
			}
		}
		switch {
		case apiErr.StatusCode == http.StatusTooManyRequests || apiErr.Type() == "rate_limit_error":
			te.Code, te.Retryable = contract.FailRateLimited, true
			te.Message = "the model API is rate limited" + later + "; try again later"
		case apiErr.StatusCode == 529 || apiErr.Type() == "overloaded_error":
			te.Code, te.Retryable = contract.FailOverloaded, true
			te.Message = "the model is overloaded" + later + "; try again shortly"
		case apiErr.StatusCode == http.StatusUnauthorized || apiErr.StatusCode == http.StatusForbidden:
			te.Code, te.Message = contract.FailAuth, "the gateway refused the worker's credentials"
		case apiErr.StatusCode >= 500:
			te.Code, te.Message, te.Retryable = contract.FailModelError, "the model API failed"+later, true
		default:
			te.Code, te.Message = contract.FailModelError, "the model API rejected the request: "+apiErr.Message
		}
		return te
	}
	return &harness.TurnError{Code: contract.FailModelError, Message: "the model could not be reached", Retryable: true, Err: err}
}

// budgetFailure returns the failure of a call a budget limit refused, as the
// gateway-proxy says in its error body (a 429) or in the error event that
// ends a stream a hard limit cut off: error.talkide_budget. Nil when err is
// no budget denial.
func budgetFailure(apiErr *anthropic.Error) *harness.TurnError {
	var body struct {
		Error struct {
			Message string                 `json:"message"`
			Budget  *contract.BudgetDenial `json:"talkide_budget"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(apiErr.RawJSON()), &body) != nil || body.Error.Budget == nil {
		return nil
	}
	b := body.Error.Budget
	denial := strings.TrimPrefix(body.Error.Message, contract.BudgetMessagePrefix)
	te := &harness.TurnError{Code: contract.FailBudgetExhausted, Budget: b, Err: apiErr,
		// Only calls in flight stood in the way: once they are done, the
		// same message may pass. Otherwise nothing passes before the
		// limit frees room (the message says when) or is raised.
		Retryable: b.InFlight}
	if b.MidStream {
		// The stream was answered 200; its failure came as an event.
		te.Message = "the response was cut off by a hard budget limit: " + strings.Replace(denial, "; the response was cut off here", "", 1)
		return te
	}
	te.HTTPStatus = apiErr.StatusCode
	te.Message = "the budget is exhausted: " + denial
	return te
}

func persistErr(err error) error {
	return &harness.TurnError{Code: contract.FailInternal, Message: "the session could not be saved", Retryable: true, Err: err}
}
