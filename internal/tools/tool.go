// Package tools is the agent's headless toolset — Bash, Read, Write, Edit,
// Glob, Grep, LS and TodoWrite, with Claude Code's names and input shapes —
// confined to one conversation's workspace directory, and the deployment's
// Policy that allows or denies each call before it runs.
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/talkide/platform/internal/build"
	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/sandbox"
)

// Tool is one tool the model may call. Implementations are safe for
// concurrent use; each Run is independent.
type Tool interface {
	Name() string
	// Description is the text the model sees.
	Description() string
	// InputSchema is a JSON Schema object:
	// {"type":"object","properties":{...},"required":[...]}. Each call
	// returns a fresh map the caller may modify.
	InputSchema() map[string]any
	// Run executes one call. A failure of the tool itself (file missing, bad
	// input, non-zero exit…) is returned as Result{IsError: true, Output:
	// "<clear message>"}, not as a Go error. A Go error means the call could
	// not run at all (ctx cancelled, no workspace).
	Run(ctx context.Context, call Call) (Result, error)
}

// Call is one invocation of a tool by the model.
type Call struct {
	ID        string // tool_use id
	Input     json.RawMessage
	Workspace *Workspace
	// Output, when non-nil, receives chunks of output while the tool runs
	// (Bash streams its combined stdout and stderr through it). It may be
	// called from a goroutine other than Run's; calls are serialized, and
	// every call happens before Run returns.
	Output func(chunk string)
	// StateDir, when not empty, is an absolute per-conversation directory
	// on the session volume where tools may keep state (created on first
	// use, 0o700): TodoWrite keeps todos.json there, and an output cut for
	// the model is kept whole as SpillDir/<ID>.txt. The model cannot read
	// it. Empty means nothing is kept.
	StateDir string
	// Jail is the sandbox the call's processes start in; a tool that
	// starts processes (Bash) refuses to run without one.
	Jail *sandbox.Jail
	// Conversation is the conversation's id: Build names its Kubernetes
	// Job by it and the call's ID.
	Conversation string
}

// StateDirOf returns the StateDir of a conversation whose session directory
// is sessionDir: every harness gives its tools this one, and the worker
// reads the outputs and originals kept there for the browser.
func StateDirOf(sessionDir string) string { return filepath.Join(sessionDir, "tools") }

// Result is what the model sees of a call.
type Result struct {
	Output  string
	IsError bool
}

// Options configures the default toolset. The zero value (or nil) means the
// defaults.
type Options struct {
	// BashTimeout is the default timeout when a Bash call names none.
	// Default 2 minutes; values above 10 minutes are lowered to 10 minutes.
	BashTimeout time.Duration
	// MaxOutputBytes caps a result's Output. Beyond it, output is cut in
	// the middle with the note "[output truncated: N bytes total]", keeping
	// head and tail, and kept whole under Call.StateDir. Default 30000.
	MaxOutputBytes int
	// Env is the complete environment of Bash processes; the caller scrubs
	// secrets. Nil means a minimal environment: PATH=/usr/local/bin:/usr/bin:/bin,
	// HOME=<workspace root>, LANG=C.UTF-8, TERM=dumb. The process's own
	// environment is never inherited.
	Env []string
	// Builds, when set, runs the Build tool's builds (a local or a
	// Kubernetes runner); nil leaves Build out of the toolset.
	Builds build.Runner
}

// Defaults and limits.
const (
	DefaultBashTimeout    = 2 * time.Minute
	MaxBashTimeout        = 10 * time.Minute
	DefaultMaxOutputBytes = 30000

	// minOutputBytes keeps a tiny MaxOutputBytes from leaving no room for
	// the truncation note.
	minOutputBytes = 200
)

func (o *Options) withDefaults() Options {
	c := defaults.Copy(o)
	defaults.IfNotPositive(&c.BashTimeout, DefaultBashTimeout)
	c.BashTimeout = min(c.BashTimeout, MaxBashTimeout)
	defaults.IfNotPositive(&c.MaxOutputBytes, DefaultMaxOutputBytes)
	c.MaxOutputBytes = max(c.MaxOutputBytes, minOutputBytes)
	if c.Env != nil {
		c.Env = append([]string{}, c.Env...)
	}
	return c
}

// Default returns the default toolset, in this order: Bash, Read, Write,
// Edit, Glob, Grep, LS, TodoWrite, and Build when Options.Builds is set.
// opts may be nil.
func Default(opts *Options) []Tool {
	o := opts.withDefaults()
	ts := []Tool{
		&Bash{Timeout: o.BashTimeout, MaxOutputBytes: o.MaxOutputBytes, Env: o.Env},
		&Read{MaxOutputBytes: o.MaxOutputBytes},
		&Write{},
		&Edit{},
		&Glob{MaxOutputBytes: o.MaxOutputBytes},
		&Grep{MaxOutputBytes: o.MaxOutputBytes},
		&LS{MaxOutputBytes: o.MaxOutputBytes},
		&TodoWrite{},
	}
	if o.Builds != nil {
		ts = append(ts, &Build{Runner: o.Builds, MaxOutputBytes: o.MaxOutputBytes})
	}
	return ts
}

// Find returns the tool called name, or nil.
func Find(tools []Tool, name string) Tool {
	for _, t := range tools {
		if t.Name() == name {
			return t
		}
	}
	return nil
}

// outputCap returns the output cap for a tool's MaxOutputBytes field.
func outputCap(n int) int {
	if n <= 0 {
		return DefaultMaxOutputBytes
	}
	return max(n, minOutputBytes)
}

// objectSchema is a tool's input schema: a JSON object with these
// properties, of which required must be given. It builds a fresh map on each
// call, so that a caller may change what it gets.
func objectSchema(properties map[string]any, required ...any) map[string]any {
	return map[string]any{"type": "object", "properties": properties, "required": required}
}

// property is the schema of one input field of the JSON type typ.
func property(typ, description string) map[string]any {
	return map[string]any{"type": typ, "description": description}
}

// errorResult is a tool failure the model sees.
func errorResult(format string, args ...any) Result {
	return Result{Output: fmt.Sprintf(format, args...), IsError: true}
}

// errNoWorkspace is returned (as a Go error) when a call has no workspace:
// a programming error in the caller, not something the model can fix.
var errNoWorkspace = errors.New("tools: call has no workspace")

// start checks what every Run checks first.
func start(ctx context.Context, call Call) error {
	if call.Workspace == nil {
		return errNoWorkspace
	}
	return ctx.Err()
}

// begin makes the checks every Run makes first and decodes the call's
// input into in (see decodeInput). When done, Run returns res and err as
// they are: err for a call without a workspace or with a finished context,
// res for input the model has to correct.
func begin(ctx context.Context, call Call, in any, required ...string) (res Result, done bool, err error) {
	if err := start(ctx, call); err != nil {
		return Result{}, true, err
	}
	if err := decodeInput(call.Input, in, required...); err != nil {
		return errorResult("%v", err), true, nil
	}
	return Result{}, false, nil
}

// decodeInput decodes a tool's JSON input into v, a pointer to its input
// struct. Unknown fields are ignored. The returned error, meant for the
// model, names the offending field: a wrong type, or a required field that
// is missing or null.
func decodeInput(raw json.RawMessage, v any, required ...string) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return fmt.Errorf("invalid input: the input must be a JSON object (%v)", err)
	}
	for _, name := range required {
		f, ok := fields[name]
		if !ok || string(bytes.TrimSpace(f)) == "null" {
			return fmt.Errorf("invalid input: required field %q is missing", name)
		}
	}
	// The schemas say "number", as Claude Code's do; accept 2000.0 or 2e3
	// where an integer is meant.
	rewritten := false
	for name, f := range fields {
		if n, ok := integralNumber(f); ok {
			fields[name] = n
			rewritten = true
		}
	}
	if rewritten {
		var err error
		if raw, err = json.Marshal(fields); err != nil {
			return fmt.Errorf("invalid input: %v", err)
		}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return fmt.Errorf("invalid input: field %q must be %s, got %s", te.Field, jsonKind(te.Type), te.Value)
		}
		return fmt.Errorf("invalid input: %v", err)
	}
	return nil
}

// integralNumber returns a JSON number written with a fraction or an
// exponent but with an integral value, such as 2000.0 or 1e3, as an integer
// literal.
func integralNumber(f json.RawMessage) (json.RawMessage, bool) {
	f = bytes.TrimSpace(f)
	if len(f) == 0 || !(f[0] == '-' || f[0] >= '0' && f[0] <= '9') || !bytes.ContainsAny(f, ".eE") {
		return nil, false
	}
	x, err := strconv.ParseFloat(string(f), 64)
	if err != nil || x != math.Trunc(x) || math.Abs(x) > 1<<53 {
		return nil, false
	}
	return json.RawMessage(strconv.FormatInt(int64(x), 10)), true
}

// jsonKind names a Go type the way a JSON schema would.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}

// nonNegative checks an optional integer field.
func nonNegative(name string, v int) error {
	if v < 0 {
		return fmt.Errorf("invalid input: field %q must not be negative, got %d", name, v)
	}
	return nil
}

// truncateNote is the note inserted where output was cut.
func truncateNote(total int) string {
	return fmt.Sprintf("\n\n[output truncated: %d bytes total]\n\n", total)
}

// truncate caps s at about max bytes, keeping its head and tail and noting
// the total size in the middle. Cuts fall on UTF-8 boundaries.
func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	note := truncateNote(len(s))
	room := max - len(note)
	if room < 0 {
		room = 0
	}
	head := room / 2
	tail := room - head
	return headUTF8(s[:head]) + note + tailUTF8(s[len(s)-tail:])
}

// headUTF8 drops an incomplete rune from the end of s.
func headUTF8(s string) string {
	for i := 0; i < utf8.UTFMax && len(s) > 0; i++ {
		r, size := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || size != 1 {
			break
		}
		// An invalid byte at the end: drop it only if it is part of a rune
		// cut short, i.e. a continuation or leading byte.
		if s[len(s)-1] < 0x80 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}

// tailUTF8 drops continuation bytes from the start of s.
func tailUTF8(s string) string {
	for i := 0; i < utf8.UTFMax && len(s) > 0 && !utf8.RuneStart(s[0]); i++ {
		s = s[1:]
	}
	return s
}

// countLines counts lines the way an editor does: a final line without a
// newline counts.
func countLines(s string) int {
	n := strings.Count(s, "\n")
	if s != "" && !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

// plural returns "1 line", "2 lines", "2 matches".
func plural(n int, word string) string {
	switch {
	case n == 1:
		return fmt.Sprintf("%d %s", n, word)
	case strings.HasSuffix(word, "ch"), strings.HasSuffix(word, "s"):
		return fmt.Sprintf("%d %ses", n, word)
	default:
		return fmt.Sprintf("%d %ss", n, word)
	}
}

// StreamCap wraps emit, a Call's Output, so that it passes on the first max
// bytes of output, then one note that the live output stopped, then
// nothing: what streams is durable and replayed to every client, so a
// command printing gigabytes must not stream gigabytes. The tool's result
// still shows how the output ended.
func StreamCap(max int, emit func(string)) func(string) {
	sent, stopped := 0, false
	return func(chunk string) {
		if stopped {
			return
		}
		if sent+len(chunk) > max {
			if rest := max - sent; rest > 0 {
				emit(chunk[:rest])
			}
			emit(fmt.Sprintf("\n[live output stopped after %d bytes; the tool's result shows how it ended]\n", max))
			stopped = true
			return
		}
		sent += len(chunk)
		emit(chunk)
	}
}
