package anthropicsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
)

// apiError is a failure answered in the Anthropic error shape. Msg is what the
// client sees; Err, when set, is the cause and is only logged.
type apiError struct {
	Status int
	Type   string
	Msg    string
	Err    error
}

func (e *apiError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%d %s: %s: %v", e.Status, e.Type, e.Msg, e.Err)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Msg)
}

func (e *apiError) Unwrap() error { return e.Err }

// newAPIError returns an error with the Anthropic error type that belongs to
// status.
func newAPIError(status int, format string, args ...any) *apiError {
	return &apiError{Status: status, Type: errorType(status), Msg: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *apiError {
	return newAPIError(http.StatusBadRequest, format, args...)
}

// errorType maps an HTTP status to the error type the real API uses for it.
// Statuses it has no special type for fall back by class.
func errorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusInternalServerError:
		return "api_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

type errorBody struct {
	Type  string     `json:"type"`
	Error errorInner `json:"error"`
}

type errorInner struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// writeError answers with e in the shape {"type":"error","error":{...}}.
// A 429 carries retry-after: 1, as the real API sends a retry-after.
func writeError(w http.ResponseWriter, e *apiError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.Status == http.StatusTooManyRequests {
		h.Set("retry-after", "1")
	}
	w.WriteHeader(e.Status)
	b, _ := marshal(errorBody{Type: "error", Error: errorInner{Type: e.Type, Message: e.Msg}})
	w.Write(append(b, '\n'))
}

// marshal encodes v as compact JSON without HTML escaping, so that text such
// as "<tag>" travels as the real API sends it.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
