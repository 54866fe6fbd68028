package contract

import "time"

// Version is the contract version; every worker command path starts with it.
const Version = "v1"

// Worker command paths (control-plane → worker). All are signed with
// X-Worker-Token except HealthPath.
const (
	SessionsPath  = "/v1/sessions"                // POST: create or get; GET: the sessions whose turn runs
	SessionPath   = "/v1/sessions/{id}"           // GET: state
	MessagesPath  = "/v1/sessions/{id}/messages"  // POST: send a user message
	StreamPath    = "/v1/sessions/{id}/stream"    // GET: SSE events
	InterruptPath = "/v1/sessions/{id}/interrupt" // POST: stop the running turn
	HealthPath    = "/healthz"
)

// Limits on command bodies, enforced by the worker and by the control-plane
// before it forwards anything.
const (
	MaxCommandBody = 1 << 20   // bytes of any command body
	MaxMessageText = 256 << 10 // bytes of one user message's text
)

// CreateSessionRequest is the body of POST /v1/sessions. It is idempotent on
// ConversationID: a second call returns the existing session's state.
type CreateSessionRequest struct {
	ConversationID string `json:"conversation_id"`
	// UserID is the platform user who owns the conversation; the worker
	// records it for reports and never uses it for authorization.
	UserID string `json:"user_id,omitempty"`
}

// SessionState is the answer to create-or-get, to GET /v1/sessions/{id}, and
// the body of a successful interrupt.
type SessionState struct {
	ConversationID string    `json:"conversation_id"`
	Created        bool      `json:"created,omitempty"` // true only on the call that created it
	Status         string    `json:"status"`            // StatusIdle or StatusRunning
	RunningTurnID  string    `json:"running_turn_id,omitempty"`
	LastSeq        int64     `json:"last_seq"` // sequence number of the newest event
	Turns          int       `json:"turns"`    // turns started so far
	CreatedAt      time.Time `json:"created_at"`
	Harness        string    `json:"harness"`
}

// RunningSessions is the answer to GET /v1/sessions: the worker's sessions
// with a turn running, at most MaxRunningSessions of them (Truncated when
// there were more). A worker holds many sessions open and runs few turns at
// once, so the list stays short; a control-plane reads it for the
// conversation list's running marks, one call per tenant-env instead of one
// per conversation.
type RunningSessions struct {
	Sessions  []SessionState `json:"sessions"`
	Truncated bool           `json:"truncated,omitempty"`
}

// MaxRunningSessions bounds RunningSessions.Sessions.
const MaxRunningSessions = 1000

// Session statuses.
const (
	StatusIdle    = "idle"
	StatusRunning = "running"
)

// SendMessageRequest is the body of POST /v1/sessions/{id}/messages.
// It is idempotent on ClientMessageID: a retry with the same id returns the
// turn the first call started and starts nothing.
type SendMessageRequest struct {
	ClientMessageID string `json:"client_message_id"`
	Text            string `json:"text"`
	// Attachments are workspace paths (attachments/NAME) of files stored
	// through AttachmentsPath; the text names them too. The native
	// harness shows the images among them to the model.
	Attachments []string `json:"attachments,omitempty"`
}

// SendMessageResponse answers SendMessageRequest (202 when a turn was
// started, 200 when ClientMessageID had been seen before).
type SendMessageResponse struct {
	ConversationID  string `json:"conversation_id"`
	ClientMessageID string `json:"client_message_id"`
	TurnID          string `json:"turn_id"`
	Duplicate       bool   `json:"duplicate,omitempty"`
	// Seq is the sequence number of the user.message event of this turn.
	Seq int64 `json:"seq"`
}

// InterruptResponse answers POST /v1/sessions/{id}/interrupt.
type InterruptResponse struct {
	ConversationID string `json:"conversation_id"`
	// TurnID is the turn that was asked to stop, empty when none was running.
	TurnID      string `json:"turn_id,omitempty"`
	Interrupted bool   `json:"interrupted"`
}
