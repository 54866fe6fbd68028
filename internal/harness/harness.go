// Package harness defines how the worker runs one turn of a session: the
// Harness interface and the typed failure a turn ends with. Implementations
// live in harness/native (an in-process agent loop on the Anthropic Go SDK)
// and harness/claudecode (the Claude Code CLI as a subprocess).
package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/sandbox"
)

// Harness runs turns. RunTurn is called for one session at a time (the
// worker never runs two turns of a session at once) but for many sessions
// concurrently.
type Harness interface {
	// Name identifies the harness in session metadata and events.
	Name() string
	// RunTurn answers one user message: it calls the model, runs tools, and
	// emits events through t.Emit as things happen. It returns when the turn
	// is over. Cancelling ctx interrupts the turn: RunTurn then returns
	// promptly with ctx's error, leaving the session's state valid for the
	// next turn. Any other failure is a *TurnError.
	RunTurn(ctx context.Context, t *Turn) (Result, error)
}

// Turn is one turn's input and its outlets.
type Turn struct {
	ConversationID string
	TurnID         string
	UserID         string
	Text           string
	// Attachments are workspace paths of files the user attached to the
	// message (contract.SendMessageRequest.Attachments); Text names them.
	Attachments []string
	// SessionDir is the session's directory on the session volume; the
	// harness keeps its transcript there.
	SessionDir string
	// Workspace is the conversation's working tree.
	Workspace string
	// Transcript persists and restores the harness's conversation records.
	Transcript Transcript
	// Jail is the sandbox every process of the turn starts in; nil when
	// the worker gives none, and then the harness starts no process.
	Jail *sandbox.Jail
	// Emit records an event in the session's log and streams it. The worker
	// fills Seq, ConversationID, TurnID and Time.
	Emit func(contract.Event)
	// Report queues a report for the control-plane. The worker fills the
	// idempotency key when empty, ConversationID, TurnID and Time, and
	// Traceparent when empty with the turn's: a harness sets it to the
	// span of the model or tool call the report is about.
	Report func(contract.Report)
}

// Transcript is the durable record of a session's conversation as the
// harness sees it, one JSON value per record.
type Transcript interface {
	// Records returns the records from the last compaction point on.
	Records() ([]json.RawMessage, error)
	Append(rec json.RawMessage) error
	// Compact appends rec as the start of a new context: Records returns it
	// and what follows; earlier records stay on disk as history.
	Compact(rec json.RawMessage) error
}

// MemTranscript is a Transcript in memory: a sub-agent's, and the tests'.
// Its zero value is empty and ready; it is safe for concurrent use.
type MemTranscript struct {
	mu   sync.Mutex
	recs []json.RawMessage // guarded by mu
}

// Records returns copies of the records since the last compaction (nil
// for none).
func (m *MemTranscript) Records() ([]json.RawMessage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []json.RawMessage
	for _, r := range m.recs {
		out = append(out, append(json.RawMessage(nil), r...))
	}
	return out, nil
}

// Append keeps a copy of rec, which must be JSON.
func (m *MemTranscript) Append(rec json.RawMessage) error {
	if !json.Valid(rec) {
		return errors.New("harness: a transcript record that is not JSON")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs = append(m.recs, append(json.RawMessage(nil), rec...))
	return nil
}

// Compact starts a new context with rec, as the session store does.
func (m *MemTranscript) Compact(rec json.RawMessage) error {
	m.mu.Lock()
	m.recs = nil
	m.mu.Unlock()
	return m.Append(rec)
}

// Result is how a turn ended when it ended normally.
type Result struct {
	StopReason string
	ModelCalls int
}

// TurnError is a turn's failure with a machine-readable code (one of the
// contract.Fail* codes) and whether retrying can help.
type TurnError struct {
	Code       string
	Message    string
	Retryable  bool
	HTTPStatus int
	// Budget details a contract.FailBudgetExhausted failure, when known.
	Budget *contract.BudgetDenial
	Err    error // the cause, for logs; never shown to the user
}

func (e *TurnError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return e.Code + ": " + e.Message
}

func (e *TurnError) Unwrap() error { return e.Err }

// Failure converts any error RunTurn returned into the turn.failed payload.
func Failure(err error) contract.TurnFailure {
	var te *TurnError
	switch {
	case errors.As(err, &te):
		return contract.TurnFailure{Code: te.Code, Message: te.Message, Retryable: te.Retryable, HTTPStatus: te.HTTPStatus, Budget: te.Budget}
	case errors.Is(err, context.Canceled):
		return contract.TurnFailure{Code: contract.FailInterrupted, Message: "the turn was interrupted", Retryable: true}
	default:
		return contract.TurnFailure{Code: contract.FailInternal, Message: "the worker failed to run the turn", Retryable: true}
	}
}
