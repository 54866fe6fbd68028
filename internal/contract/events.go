package contract

import (
	"encoding/json"
	"strings"
	"time"
)

// Event kinds streamed from the worker (and relayed by the control-plane).
const (
	KindSessionCreated = "session.created"
	KindSessionResumed = "session.resumed" // a worker (re)opened the session from disk
	KindUserMessage    = "user.message"
	KindTurnStarted    = "turn.started"
	KindTextDelta      = "text.delta"
	KindMessage        = "assistant.message" // one assistant message is complete
	KindToolStarted    = "tool.started"
	KindToolOutput     = "tool.output" // a chunk of a running tool's output
	KindToolFinished   = "tool.finished"
	KindUsage          = "usage"
	KindTurnFinished   = "turn.finished"
	KindTurnFailed     = "turn.failed"
	KindNotice         = "notice" // operator-facing information, e.g. "model simulator in use"
)

// Codes of turn.failed.
const (
	FailInterrupted     = "interrupted"
	FailWorkerRestarted = "worker_restarted"
	FailModelError      = "model_error"
	FailRateLimited     = "rate_limited"
	// FailBudgetExhausted: a budget limit (docs/budgets.md) refused the
	// turn's model call, or a hard limit cut its response off mid-stream.
	// failure.budget says which limit, where its subject stands and when
	// it frees room; retryable only when calls in flight alone stood in
	// the way.
	FailBudgetExhausted = "budget_exhausted"
	FailOverloaded      = "overloaded"
	FailAuth            = "gateway_auth"
	FailMaxTurns        = "max_turns"
	FailInternal        = "internal"
)

// Event is one entry of a conversation's event log. Seq is per conversation,
// starts at 1, increases by one, and is the SSE id. Exactly the fields of the
// event's kind are set.
type Event struct {
	Seq            int64     `json:"seq"`
	Kind           string    `json:"kind"`
	ConversationID string    `json:"conversation_id"`
	TurnID         string    `json:"turn_id,omitempty"`
	Time           time.Time `json:"time"`

	// user.message
	ClientMessageID string `json:"client_message_id,omitempty"`
	// user.message, text.delta, assistant.message, notice
	Text string `json:"text,omitempty"`
	// text.delta: index of the content block within the assistant message
	Index int `json:"index,omitempty"`

	// ParentToolUseID, on the text, message, tool and usage events of a
	// sub-agent, names the Task tool call whose sub-agent produced the
	// event, so a client can show that work under the call instead of as
	// the main agent's. Absent on the main agent's events (and on every
	// event of a harness that does not run sub-agents), so clients that
	// ignore it read the log as before.
	ParentToolUseID string `json:"parent_tool_use_id,omitempty"`

	Tool    *ToolEvent    `json:"tool,omitempty"`
	Usage   *Usage        `json:"usage,omitempty"`
	Finish  *TurnFinish   `json:"finish,omitempty"`
	Failure *TurnFailure  `json:"failure,omitempty"`
	Session *SessionEvent `json:"session,omitempty"`
}

// ToolEvent describes a tool call in tool.started, tool.output, tool.finished.
type ToolEvent struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input,omitempty"` // tool.started
	// Output is a chunk (tool.output) or the result the model sees
	// (tool.finished), possibly truncated; Truncated says so.
	Output     string `json:"output,omitempty"`
	Truncated  bool   `json:"truncated,omitempty"`
	IsError    bool   `json:"is_error,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
}

// Usage is what one model call consumed, as the model reported it.
type Usage struct {
	Model                    string `json:"model"`
	InputTokens              int64  `json:"input_tokens"`
	OutputTokens             int64  `json:"output_tokens"`
	CacheCreationInputTokens int64  `json:"cache_creation_input_tokens,omitempty"`
	CacheReadInputTokens     int64  `json:"cache_read_input_tokens,omitempty"`
}

// TurnFinish closes a turn that ended normally.
type TurnFinish struct {
	StopReason string `json:"stop_reason"` // the model's last stop_reason
	ModelCalls int    `json:"model_calls"`
	DurationMS int64  `json:"duration_ms"`
}

// TurnFailure closes a turn that did not end normally.
type TurnFailure struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	// HTTPStatus is the model API's status when the failure came from it.
	HTTPStatus int `json:"http_status,omitempty"`
	// Budget details a budget_exhausted failure, when the harness could
	// read them.
	Budget *BudgetDenial `json:"budget,omitempty"`
}

// SessionEvent details session.created and session.resumed.
type SessionEvent struct {
	Harness  string `json:"harness"`
	WorkerID string `json:"worker_id,omitempty"`
	// Messages is the number of transcript messages restored on resume.
	Messages int `json:"messages,omitempty"`
}

// MaxToolIDLength bounds a tool call's id (tool.id, parent_tool_use_id):
// the model API's ids are a few dozen characters.
const MaxToolIDLength = 200

// ValidateParent checks the event's parent_tool_use_id: absent, or one
// line of text of at most MaxToolIDLength characters, on an event a
// sub-agent produces (text.delta, assistant.message, tool.*, usage) of a
// turn, and never the event's own tool call.
func (e *Event) ValidateParent() error {
	if e.ParentToolUseID == "" {
		return nil
	}
	if _, err := ValidateLine("parent_tool_use_id", e.ParentToolUseID, MaxToolIDLength); err != nil {
		return err
	}
	if e.ParentToolUseID != strings.TrimSpace(e.ParentToolUseID) {
		return Invalid(nil, "parent_tool_use_id", "has white space around it")
	}
	switch e.Kind {
	case KindTextDelta, KindMessage, KindToolStarted, KindToolOutput, KindToolFinished, KindUsage:
	default:
		return Invalid(nil, "parent_tool_use_id", "is set on a %s event, which no sub-agent produces", e.Kind)
	}
	if e.TurnID == "" {
		return Invalid(nil, "parent_tool_use_id", "is set on an event outside a turn")
	}
	if e.Tool != nil && e.Tool.ID == e.ParentToolUseID {
		return Invalid(nil, "parent_tool_use_id", "names the event's own tool call")
	}
	return nil
}

// Terminal reports whether the kind ends a turn.
func Terminal(kind string) bool { return kind == KindTurnFinished || kind == KindTurnFailed }
