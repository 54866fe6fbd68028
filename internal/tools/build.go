package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/build"
	"github.com/talkide/platform/internal/observe"
)

// BuildInput is the input of Build.
type BuildInput struct {
	Kind       string   `json:"kind,omitempty"` // gradle (default) or image
	Tasks      []string `json:"tasks,omitempty"`
	Args       []string `json:"args,omitempty"`
	Context    string   `json:"context,omitempty"`
	Dockerfile string   `json:"dockerfile,omitempty"`
	Image      string   `json:"image,omitempty"`
	Timeout    int      `json:"timeout,omitempty"` // milliseconds; 0 means the runner's default
}

const buildDescription = `Builds and tests the workspace's project, away from your own process: {"tasks": ["test"]} runs the Gradle wrapper (./gradlew) with those tasks; {"kind": "image", "context": ".", "dockerfile": "Dockerfile", "image": "registry.example.com/team/app:1.0"} builds a container image and pushes it.

- Prefer this tool over running ./gradlew with Bash: the build gets its own memory and time, and its test results are summarised for you.
- tasks are Gradle task names (test, :app:check); args are Gradle options, one word each (["--tests", "com.acme.*Test", "-Pprofile=ci"]). There is no shell: no quotes, pipes or substitutions.
- The log streams live to the user; you get the end of it, the exit status, the duration and a summary of the JUnit XML test reports (counts and the first failures with their messages). The full log is kept when it is too long to show.
- timeout is in milliseconds (default 30 minutes, max 2 hours). A failed build is not retried: decide yourself whether to retry or fix.
- This runs on the %s runner.`

// Build runs a build through a build.Runner. The zero value refuses to run
// (no runner).
type Build struct {
	Runner         build.Runner
	MaxOutputBytes int // 0 means DefaultMaxOutputBytes
}

func (*Build) Name() string { return "Build" }

func (b *Build) Description() string {
	name := "unconfigured"
	if b.Runner != nil {
		name = b.Runner.Name()
	}
	return fmt.Sprintf(buildDescription, name)
}

func (*Build) InputSchema() map[string]any {
	strs := func(desc string) map[string]any {
		return map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "description": desc}
	}
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"kind":       map[string]any{"type": "string", "enum": []any{"gradle", "image"}, "description": "gradle (default): run ./gradlew with tasks; image: build and push a container image"},
			"tasks":      strs("Gradle tasks to run, e.g. [\"test\"] or [\":app:check\"] (kind gradle)"),
			"args":       strs("Gradle options, one word each, e.g. [\"--tests\", \"com.acme.*Test\"] (kind gradle)"),
			"context":    property("string", "The build context directory, relative to the workspace root (kind image; default \".\")"),
			"dockerfile": property("string", "The Dockerfile, relative to the workspace root (kind image; default <context>/Dockerfile)"),
			"image":      property("string", "The image reference to push to, registry/name:tag (kind image)"),
			"timeout":    property("number", "Optional timeout in milliseconds (max 7200000)"),
		},
	}
}

func (b *Build) Run(ctx context.Context, call Call) (Result, error) {
	if err := start(ctx, call); err != nil {
		return Result{}, err
	}
	if b.Runner == nil {
		return errorResult("Build cannot run: this worker has no build runner configured"), nil
	}
	var in BuildInput
	if err := decodeInput(call.Input, &in); err != nil {
		return errorResult("%v", err), nil
	}
	switch {
	case in.Timeout < 0:
		return errorResult("invalid input: field \"timeout\" must not be negative, got %d", in.Timeout), nil
	case in.Timeout > int(build.MaxTimeout/time.Millisecond):
		return errorResult("invalid input: field \"timeout\" must be at most %d (milliseconds), got %d", build.MaxTimeout/time.Millisecond, in.Timeout), nil
	}
	spec := build.Spec{Kind: build.Kind(in.Kind), Tasks: in.Tasks, Args: in.Args, Context: in.Context, Dockerfile: in.Dockerfile, Image: in.Image}
	if err := spec.Validate(call.Workspace.Root()); err != nil {
		return errorResult("Build: %v", err), nil
	}
	maxOut := outputCap(b.MaxOutputBytes)
	full := newSpill(call, maxOut)
	out := newHeadTail(maxOut)
	out.tee = full
	stream := &runeStream{out: out, emit: call.Output}
	// The runners mark the build's steps on this span (queued, Job
	// created, pod running); its tasks and arguments are not on it.
	bctx, span := observe.Start(ctx, observe.FromContext(ctx, "build"), "build",
		trace.WithAttributes(attribute.String("talkide.build.kind", string(spec.Kind)), attribute.String("talkide.build.runner", b.Runner.Name())))
	res, err := b.Runner.Run(bctx, build.Request{
		Spec:         spec,
		Conversation: call.Conversation,
		ToolCall:     call.ID,
		Workspace:    call.Workspace.Root(),
		Jail:         call.Jail,
		Output:       stream,
		Timeout:      time.Duration(in.Timeout) * time.Millisecond,
	})
	if span.IsRecording() {
		span.SetAttributes(attribute.String("talkide.build.status", string(res.Status)), attribute.Int("process.exit.code", res.ExitCode))
	}
	observe.End(span, err, "build_not_run")
	stream.flush()
	if ctx.Err() != nil {
		full.finish(false)
		return Result{Output: out.String(), IsError: true}, ctx.Err()
	}
	if err != nil {
		full.finish(false)
		if errors.Is(err, build.ErrInvalid) || errors.Is(err, build.ErrUnsupported) {
			return errorResult("Build: %v", err), nil
		}
		text := out.String()
		return errorResult("%sBuild could not run: %v", withNewline(text), err), nil
	}
	text := appendNote(out.String(), full.finish(out.cut()))
	if text == "" {
		text = "(no output)"
	}
	return Result{Output: withNewline(text) + "\n" + buildSummary(spec, res), IsError: res.Status != build.Succeeded}, nil
}

func withNewline(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		return s + "\n"
	}
	return s
}

// buildSummary is what the model reads last: how the build ended and what
// the tests said.
func buildSummary(spec build.Spec, res build.Result) string {
	var b strings.Builder
	verdict := "Build succeeded"
	switch res.Status {
	case build.Failed:
		verdict = "Build FAILED"
	case build.TimedOut:
		verdict = "Build TIMED OUT"
	case build.Killed:
		verdict = "Build KILLED"
	}
	fmt.Fprintf(&b, "%s: %s", verdict, spec.String())
	var facts []string
	if res.ExitCode >= 0 {
		facts = append(facts, fmt.Sprintf("exit status %d", res.ExitCode))
	}
	facts = append(facts, res.Duration.Round(100*time.Millisecond).String())
	if res.Where != "" {
		facts = append(facts, res.Where)
	}
	fmt.Fprintf(&b, " (%s)", strings.Join(facts, ", "))
	if res.Reason != "" && res.Reason != fmt.Sprintf("exit status %d", res.ExitCode) {
		fmt.Fprintf(&b, "\n%s", res.Reason)
	}
	if spec.Kind == build.KindGradle {
		fmt.Fprintf(&b, "\n%s", res.Tests.Summary())
	}
	return b.String()
}

// runeStream is the build's output: kept as head and tail (and spilled
// whole), and passed on as it arrives in chunks that end on rune
// boundaries.
type runeStream struct {
	out  *headTail
	emit func(string)

	mu    sync.Mutex // guards carry and serializes emit
	carry []byte     // an incomplete rune from the previous write
}

func (s *runeStream) Write(p []byte) (int, error) {
	s.out.Write(p)
	if s.emit == nil {
		return len(p), nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	chunk := append(s.carry, p...)
	cut := completeRunes(chunk)
	if cut > 0 {
		s.emit(string(chunk[:cut]))
	}
	s.carry = append([]byte(nil), chunk[cut:]...)
	return len(p), nil
}

func (s *runeStream) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.emit != nil && len(s.carry) > 0 {
		s.emit(string(s.carry))
	}
	s.carry = nil
}
