package gateway

import (
	"encoding/json"
	"net/http"

	"github.com/talkide/platform/internal/contract"
)

// Anthropic error types the gateway itself produces.
const (
	errAuthentication = "authentication_error"
	errPermission     = "permission_error"
	errNotFound       = "not_found_error"
	errInvalidRequest = "invalid_request_error"
	errTooLarge       = "request_too_large"
	errAPI            = "api_error"
	errRateLimit      = "rate_limit_error"
	errOverloaded     = "overloaded_error"
)

// httpError is a request the gateway refuses. Msg is what the client sees;
// Err is the cause, which is logged and never sent. Neither ever holds a
// credential.
type httpError struct {
	Status int
	Type   string // Anthropic error type
	Msg    string
	Budget *contract.BudgetDenial // a budget denial's details, sent with Msg
	Err    error
}

func (e *httpError) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *httpError) Unwrap() error { return e.Err }

// anthropicError is Anthropic's error body, which the SDKs parse.
type anthropicError struct {
	Type  string             `json:"type"` // always "error"
	Error anthropicErrorBody `json:"error"`
}

type anthropicErrorBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	// Budget details a budget denial for clients that read it (the native
	// harness); SDKs ignore it. The key is prefixed so that no field the
	// API may add to its own errors (it has spend limits of its own) can
	// be taken for ours.
	Budget *contract.BudgetDenial `json:"talkide_budget,omitempty"`
}

// writeError answers with an Anthropic-shaped error.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	writeErrorBody(w, status, anthropicErrorBody{Type: typ, Message: msg})
}

// writeErrorBody answers with an Anthropic-shaped error whose body is e.
func writeErrorBody(w http.ResponseWriter, status int, e anthropicErrorBody) {
	b, err := json.Marshal(anthropicError{Type: "error", Error: e})
	if err != nil {
		panic("gateway: marshal error body: " + err.Error())
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
