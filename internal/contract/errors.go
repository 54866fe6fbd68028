package contract

// Error is the one JSON error shape of every TalkIDE API (worker commands,
// worker reports, the browser API). The gateway-proxy alone answers in
// Anthropic's error shape, because its clients are Anthropic SDKs.
type Error struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody says what was wrong. Code is machine-readable and stable;
// Message is for people and never contains a secret.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error codes.
const (
	CodeBadRequest   = "bad_request"
	CodeInvalidID    = "invalid_id"
	CodeTooLarge     = "body_too_large"
	CodeUnauthorized = "unauthorized"
	CodeForbidden    = "forbidden"
	CodeNotFound     = "not_found"
	CodeConflict     = "conflict"
	CodeTurnRunning  = "turn_running"
	CodeShuttingDown = "shutting_down"
	// CodeSessionElsewhere: another worker replica holds the conversation's
	// lease (a rolling update); retry after Retry-After.
	CodeSessionElsewhere = "session_elsewhere"
	// CodeWorkerBusy: the tenant-env's worker runs the most turns it
	// takes at once; the message was not recorded: send it again after
	// Retry-After.
	CodeWorkerBusy       = "worker_busy"
	CodeUnavailable      = "unavailable"
	CodeInternal         = "internal"
	CodeMethodNotAllowed = "method_not_allowed"
	// CodeTooManyStreams: an event stream beyond a cap of the
	// control-plane (per user, per conversation: 429; in total: 503);
	// retry after Retry-After.
	CodeTooManyStreams = "too_many_streams"
	// CodeTooManyUploads: an uploaded file's bytes would pass a bound on
	// those held in memory at once (the user's own share: 429; in total,
	// on the control-plane or the worker: 503); nothing was stored: send
	// it again after Retry-After.
	CodeTooManyUploads = "too_many_uploads"
	// CodeRateLimited: too many logins or requests from one source or with
	// one token; retry after Retry-After.
	CodeRateLimited = "rate_limited"
)
