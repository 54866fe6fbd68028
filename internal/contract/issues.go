package contract

import "time"

// Issue endpoints (worker → control-plane), signed with X-Worker-Token
// in the direction worker → control-plane, like reports. The agent files
// issues through the worker's talkide-issue-tracking MCP server; the
// control-plane stores them per tenant-env, linked to the conversation and
// its user.
const (
	IssuesPath        = "/api/internal/worker/issues"               // POST: file an issue (idempotent); GET: list a conversation's issues
	IssueCommentsPath = "/api/internal/worker/issues/{id}/comments" // POST: comment on an issue (idempotent)
)

// Limits of the issue endpoints. Lengths in characters are counted in
// Unicode code points; sizes in bytes are UTF-8 bytes.
const (
	MaxIssueRequest   = 64 << 10 // bytes of a request body
	MaxIssueTitle     = 200      // characters of a title
	MaxIssueBody      = 20 << 10 // bytes of an issue's or a comment's body
	MaxIssueLabels    = 10       // labels of one issue
	MaxIssueLabel     = 50       // characters of one label
	MaxIssueComments  = 100      // comments on one issue
	MaxIdempotencyKey = 300      // bytes of an idempotency key
	DefaultIssueList  = 50       // issues listed when no limit is given
	MaxIssueList      = 100      // issues listed at most
)

// Issue severities.
const (
	SeverityLow      = "low"
	SeverityMedium   = "medium"
	SeverityHigh     = "high"
	SeverityCritical = "critical"
)

// Severities lists the severities from the least to the most severe.
var Severities = []string{SeverityLow, SeverityMedium, SeverityHigh, SeverityCritical}

// Issue statuses, and IssueStatusAll, which lists issues of either status.
const (
	IssueOpen      = "open"
	IssueClosed    = "closed"
	IssueStatusAll = "all"
)

// CreateIssueRequest is the body of POST /api/internal/worker/issues. It is
// idempotent on IdempotencyKey within the signer's tenant-env: a retry gets
// the issue the first call filed (200 instead of 201) and files nothing.
type CreateIssueRequest struct {
	IdempotencyKey string   `json:"idempotency_key"`
	ConversationID string   `json:"conversation_id"`
	TurnID         string   `json:"turn_id,omitempty"`
	Title          string   `json:"title"`
	Body           string   `json:"body"`
	Severity       string   `json:"severity"`
	Labels         []string `json:"labels,omitempty"`
}

// CommentIssueRequest is the body of POST
// /api/internal/worker/issues/{id}/comments. It is idempotent on
// IdempotencyKey within the issue. ConversationID is the conversation the
// comment is made from; it must be the issue's.
type CommentIssueRequest struct {
	IdempotencyKey string `json:"idempotency_key"`
	ConversationID string `json:"conversation_id"`
	TurnID         string `json:"turn_id,omitempty"`
	Body           string `json:"body"`
	// Status, when set (IssueOpen or IssueClosed), changes the issue's
	// status together with the comment.
	Status string `json:"status,omitempty"`
}

// Issue is an issue as the control-plane keeps it, with its comments
// oldest first.
type Issue struct {
	ID             string         `json:"id"`
	ConversationID string         `json:"conversation_id"`
	TurnID         string         `json:"turn_id,omitempty"` // the turn that filed it
	Title          string         `json:"title"`
	Body           string         `json:"body"`
	Severity       string         `json:"severity"`
	Labels         []string       `json:"labels"`
	Status         string         `json:"status"`
	CreatedAt      time.Time      `json:"created_at"`
	UpdatedAt      time.Time      `json:"updated_at"` // the last comment or status change
	Comments       []IssueComment `json:"comments"`
}

// IssueComment is one comment on an issue.
type IssueComment struct {
	ID      string `json:"id"`
	IssueID string `json:"issue_id"`
	TurnID  string `json:"turn_id,omitempty"`
	Body    string `json:"body"`
	// Status is the status the comment set, empty when it set none.
	Status    string    `json:"status,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// IssueList answers GET /api/internal/worker/issues and the browser's
// GET /api/conversations/{id}/issues: newest first.
type IssueList struct {
	Issues []Issue `json:"issues"`
}
