package contract

import (
	"time"
	"unicode/utf8"
)

// Reporting endpoint (worker → control-plane), signed with X-Worker-Token.
const ReportsPath = "/api/internal/worker/reports"

// MaxReportBatch bounds a report batch body in bytes.
const MaxReportBatch = 1 << 20

// Report kinds.
const (
	ReportUsage    = "usage"
	ReportToolUse  = "tool_use"
	ReportActivity = "activity"
	// ReportTurnEnded says a turn ended, with the main agent's text of it
	// (Reply): one per turn, what the control-plane indexes for the
	// conversation search and dates the conversation's activity by.
	ReportTurnEnded = "turn_ended"
)

// MaxReplyText bounds the bytes of a turn_ended report's reply; the worker
// cuts a longer reply (at a character boundary) and says so.
const MaxReplyText = 16 << 10

// ReportBatch is the body of POST /api/internal/worker/reports.
type ReportBatch struct {
	Reports []Report `json:"reports"`
}

// Report is one fact the worker tells the control-plane. IdempotencyKey is
// unique per fact: the control-plane stores each key once, so a retried batch
// counts nothing twice.
type Report struct {
	IdempotencyKey string    `json:"idempotency_key"`
	Kind           string    `json:"kind"`
	ConversationID string    `json:"conversation_id"`
	TurnID         string    `json:"turn_id,omitempty"`
	Time           time.Time `json:"time"`

	Usage    *Usage      `json:"usage,omitempty"`    // usage
	Tool     *ToolReport `json:"tool,omitempty"`     // tool_use
	Activity string      `json:"activity,omitempty"` // activity: a one-line summary
	Reply    *TurnReply  `json:"reply,omitempty"`    // turn_ended

	// Traceparent is the W3C trace context of the turn, model call or tool
	// call the report is about, as the worker's span was when it made the
	// report; empty while the worker does not trace. It rides in the
	// signed body, so the worker's outbox keeps it for as long as the
	// report waits. The control-plane ignores a malformed one, or one of
	// more than MaxTraceparent bytes, rather than refuse the report: a
	// report is a fact, its trace only a view of it.
	Traceparent string `json:"traceparent,omitempty"`
}

// MaxTraceparent bounds the traceparent the control-plane reads: version
// 00's is 55 bytes; a later version may add fields.
const MaxTraceparent = 128

// TurnReply is what a turn_ended report carries: the text of the main
// agent's assistant messages of the turn, joined by blank lines, never a
// tool's input or output nor a sub-agent's text.
type TurnReply struct {
	Text      string `json:"text"` // may be empty: a turn that failed before any text
	Truncated bool   `json:"truncated,omitempty"`
}

// ToolReport is the control-plane's record of one tool call: no output, only
// what happened.
type ToolReport struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	IsError    bool   `json:"is_error"`
	DurationMS int64  `json:"duration_ms"`
}

// ReportAck answers a batch: Accepted counts reports stored now, Duplicates
// those already stored under the same key.
type ReportAck struct {
	Accepted   int `json:"accepted"`
	Duplicates int `json:"duplicates"`
}

// Validate checks a report as the control-plane receives it at now, each
// rule by the function that owns it: the id rule for ids, ValidateTime for
// its time (MaxReportAge), ValidateCount for its counts, ValidateLine for
// its text. A FieldError names the field as the report's JSON does
// ("usage.input_tokens"); the caller says which report of a batch.
func (r Report) Validate(now time.Time) error {
	if err := ValidateIdempotencyKey("idempotency_key", r.IdempotencyKey); err != nil {
		return err
	}
	if err := ValidateID("conversation_id", r.ConversationID); err != nil {
		return err
	}
	if r.TurnID != "" {
		if err := ValidateID("turn_id", r.TurnID); err != nil {
			return err
		}
	}
	if err := ValidateTime("time", r.Time, now, MaxReportAge); err != nil {
		return err
	}
	switch r.Kind {
	case ReportUsage:
		if r.Usage == nil {
			return Invalid(nil, "usage", "is missing from a usage report")
		}
		return r.Usage.validate("usage.")
	case ReportToolUse:
		if r.Tool == nil {
			return Invalid(nil, "tool", "is missing from a tool_use report")
		}
		if _, err := ValidateLine("tool.id", r.Tool.ID, MaxToolName); err != nil {
			return err
		}
		if _, err := ValidateLine("tool.name", r.Tool.Name, MaxToolName); err != nil {
			return err
		}
		return ValidateCount("tool.duration_ms", r.Tool.DurationMS, MaxReportDurationMS)
	case ReportActivity:
		_, err := ValidateLine("activity", r.Activity, MaxActivity)
		return err
	case ReportTurnEnded:
		switch {
		case r.TurnID == "":
			return Invalid(nil, "turn_id", "is missing from a turn_ended report")
		case r.Reply == nil:
			return Invalid(nil, "reply", "is missing from a turn_ended report")
		case len(r.Reply.Text) > MaxReplyText:
			return Invalid(nil, "reply.text", "is %d bytes, more than the %d allowed", len(r.Reply.Text), MaxReplyText)
		case !utf8.ValidString(r.Reply.Text):
			return Invalid(nil, "reply.text", "is not valid UTF-8")
		}
		return nil
	}
	return Invalid(nil, "kind", "%q is not one of %s, %s, %s, %s", r.Kind, ReportUsage, ReportToolUse, ReportActivity, ReportTurnEnded)
}

// validate checks a model call's usage as a client reports it: a model
// name, if any, by ValidateModel, and counts from 0 to MaxReportTokens.
// prefix is what the field names start with.
func (u *Usage) validate(prefix string) error {
	if u.Model != "" {
		if err := ValidateModel(prefix+"model", u.Model); err != nil {
			return err
		}
	}
	for _, c := range []struct {
		name string
		n    int64
	}{
		{"input_tokens", u.InputTokens},
		{"output_tokens", u.OutputTokens},
		{"cache_creation_input_tokens", u.CacheCreationInputTokens},
		{"cache_read_input_tokens", u.CacheReadInputTokens},
	} {
		if err := ValidateCount(prefix+c.name, c.n, MaxReportTokens); err != nil {
			return err
		}
	}
	return nil
}
