package contract

import (
	"errors"
	"fmt"
	"strings"
)

// FieldError is a value that breaks a rule of the seam's wire types or of
// an operator's query: which field, and why. Every rule is checked by one
// function, used by both sides of the seam and by the operator's tools;
// each caller names the field its own way (a JSON key, a query parameter,
// a --flag) with Rename, so that nobody cuts error strings.
type FieldError struct {
	Field  string // the field as the rule's caller named it
	Reason string // what is wrong, completing a sentence that starts with Field
	// Code is the error code of an API answer: CodeBadRequest,
	// CodeInvalidID or CodeTooLarge.
	Code string
	// Err is the sentinel the error is an instance of (ErrInvalidID,
	// ErrInvalidValue, or a package's own), for errors.Is.
	Err error
}

// ErrInvalidValue is the sentinel of a FieldError that is not about an id.
var ErrInvalidValue = errors.New("invalid value")

func (e *FieldError) Error() string { return e.Field + " " + e.Reason }

func (e *FieldError) Unwrap() error { return e.Err }

// Rename returns a copy of e naming its field name, e.g. "--model" for a
// command line's flag.
func (e *FieldError) Rename(name string) *FieldError {
	c := *e
	c.Field = name
	return &c
}

// Invalid returns a FieldError with code CodeBadRequest that is an
// ErrInvalidValue (or, when sentinel is not nil, an instance of sentinel).
func Invalid(sentinel error, field, format string, args ...any) *FieldError {
	if sentinel == nil {
		sentinel = ErrInvalidValue
	}
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...), Code: CodeBadRequest, Err: sentinel}
}

// MaxModelName bounds a model name: Anthropic's are a few dozen bytes.
const MaxModelName = 256

// ValidateModel checks a model name: 1 to MaxModelName bytes of printable
// ASCII without spaces, which every Anthropic model id is (and the ids of
// the cloud platforms that serve them, with their '.', ':' and '@'). The
// gateway records the names it forwards by this rule and the usage
// queries accept the same, so that every name recorded can be asked for.
// A NUL, for one, is refused: PostgreSQL would fail the whole batch it is
// written in.
func ValidateModel(field, name string) error {
	switch {
	case name == "":
		return Invalid(nil, field, "is empty")
	case len(name) > MaxModelName:
		return Invalid(nil, field, "is longer than %d bytes", MaxModelName)
	case !ValidModelName(name):
		return Invalid(nil, field, "is not a model name (1 to %d bytes of printable ASCII, no spaces)", MaxModelName)
	}
	return nil
}

// ValidModelName reports whether name passes ValidateModel, without
// allocating: the gateway checks the name of every event it streams.
func ValidModelName(name string) bool {
	if name == "" || len(name) > MaxModelName {
		return false
	}
	for i := range len(name) {
		if name[i] <= ' ' || name[i] > '~' {
			return false
		}
	}
	return true
}

// Validate checks a message before a turn is started for it, on both
// sides of the seam: a client message id the idempotency can key on, and
// text that says something, within MaxMessageText bytes.
func (r SendMessageRequest) Validate() error {
	if err := ValidateID("client_message_id", r.ClientMessageID); err != nil {
		return err
	}
	if strings.TrimSpace(r.Text) == "" {
		return Invalid(nil, "text", "is empty")
	}
	if len(r.Text) > MaxMessageText {
		return &FieldError{Field: "text", Reason: fmt.Sprintf("is longer than %d bytes", MaxMessageText), Code: CodeTooLarge, Err: ErrInvalidValue}
	}
	if len(r.Attachments) > MaxAttachments {
		return Invalid(nil, "attachments", "names %d files; a message takes at most %d", len(r.Attachments), MaxAttachments)
	}
	for i, p := range r.Attachments {
		if err := ValidateAttachmentPath(fmt.Sprintf("attachments[%d]", i), p); err != nil {
			return err
		}
	}
	return nil
}
