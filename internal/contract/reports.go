package contract

import "time"

// Reporting endpoint (worker → control-plane), signed with X-Worker-Token.
const ReportsPath = "/api/internal/worker/reports"

// MaxReportBatch bounds a report batch body in bytes.
const MaxReportBatch = 1 << 20

// Report kinds.
const (
	ReportUsage    = "usage"
	ReportToolUse  = "tool_use"
	ReportActivity = "activity"
)

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
