// Package build runs a conversation's builds and tests — Gradle tasks and
// container image builds — through a Runner: a sandboxed process in the
// workspace (Local) or a Kubernetes Job in the worker's namespace
// (Kubernetes), and summarises the JUnit XML reports they leave.
package build

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/talkide/platform/internal/sandbox"
)

// Kind is what a build makes.
type Kind string

// Kinds.
const (
	// KindGradle runs the workspace's Gradle wrapper with tasks.
	KindGradle Kind = "gradle"
	// KindImage builds a container image from a Dockerfile and pushes it.
	KindImage Kind = "image"
)

// Spec is what to build, as the model asked; Validate checks it.
type Spec struct {
	Kind Kind
	// Tasks and Args are the Gradle wrapper's tasks and options (KindGradle).
	Tasks []string
	Args  []string
	// Context is the image's build context, a directory relative to the
	// workspace root; Dockerfile is relative to the workspace root too
	// (default Context/Dockerfile); Image is the reference to push to
	// (KindImage).
	Context, Dockerfile, Image string
}

// Request is one build of one conversation.
type Request struct {
	Spec Spec
	// Conversation and ToolCall name the build: the Kubernetes runner labels
	// its Job with them and finds the Job again by them.
	Conversation string
	ToolCall     string
	// Workspace is the conversation's working tree, an absolute path.
	Workspace string
	// Jail is the conversation's sandbox; the local runner starts the build
	// in it and refuses to run without one.
	Jail *sandbox.Jail
	// Output receives the build's output as it runs. Writes are serialized
	// and all happen before Run returns. Nil discards it.
	Output io.Writer
	// Timeout bounds the build; zero means the runner's default.
	Timeout time.Duration
}

// Status is how a build ended.
type Status string

// Statuses.
const (
	Succeeded Status = "succeeded"
	Failed    Status = "failed"   // the build ran and failed (non-zero exit, a failed Job)
	TimedOut  Status = "timedout" // it ran past its time limit and was stopped
	Killed    Status = "killed"   // a limit other than time ended it (memory, processes)
)

// Result is how one build went.
type Result struct {
	Status Status
	// ExitCode is the build command's exit status; -1 when unknown or a
	// signal ended it.
	ExitCode int
	// Reason says, for people, why a build that did not succeed ended.
	Reason string
	// Duration is from the start of Run to the end of the build.
	Duration time.Duration
	// Where names where it ran: "local" or "Job <namespace>/<name>".
	Where string
	// Tests summarises the JUnit XML reports the build wrote; nil when it
	// wrote none.
	Tests *Tests
}

// Runner runs builds. Implementations are safe for concurrent use.
type Runner interface {
	// Run runs one build and returns how it ended; a build that fails is a
	// Result, not an error. An error means the build could not run or its
	// outcome is unknown; when ctx ends, Run stops the build (the local
	// process tree is killed, the Job deleted) and returns ctx.Err().
	Run(ctx context.Context, req Request) (Result, error)
	// Name is "local" or "kubernetes".
	Name() string
}

// ErrInvalid is wrapped by every error that a request's Spec is invalid:
// the model's to fix.
var ErrInvalid = errors.New("invalid build")

// ErrUnsupported is wrapped when a runner cannot run a kind of build (the
// local runner and image builds, a Kubernetes runner without a builder
// image).
var ErrUnsupported = errors.New("build not supported here")
