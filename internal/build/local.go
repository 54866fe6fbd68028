package build

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/outpipe"
	"github.com/talkide/platform/internal/sandbox"
)

// DefaultTimeout bounds a build whose request names no timeout; MaxTimeout
// bounds every build.
const (
	DefaultTimeout = 30 * time.Minute
	MaxTimeout     = 2 * time.Hour
)

// LocalOptions configure a Local runner; the zero value of each field is
// its default.
type LocalOptions struct {
	// Timeout is the default of requests without one; DefaultTimeout when
	// zero.
	Timeout time.Duration
	// Env entries are added to the jail's environment of every build
	// (after the runner's own: CI=true).
	Env []string
	// Limits' non-zero fields override the jail's for builds (a JVM wants
	// more memory than a shell command).
	Limits sandbox.Limits
}

// Local runs builds as processes in the conversation's workspace, inside
// its sandbox: what `talkide dev` uses, and a worker without Kubernetes.
// Image builds need a builder this runner does not have.
type Local struct {
	opts LocalOptions
}

// NewLocal returns a local runner; opts may be nil.
func NewLocal(opts *LocalOptions) *Local {
	o := defaults.Copy(opts)
	defaults.IfNotPositive(&o.Timeout, DefaultTimeout)
	o.Timeout = min(o.Timeout, MaxTimeout)
	return &Local{opts: o}
}

func (*Local) Name() string { return "local" }

// Run runs a Gradle build with the workspace's ./gradlew in the jail and
// then reads the JUnit reports it wrote.
func (l *Local) Run(ctx context.Context, req Request) (Result, error) {
	began := time.Now()
	res := Result{ExitCode: -1, Where: "local"}
	if err := req.Spec.Validate(req.Workspace); err != nil {
		return res, err
	}
	if req.Spec.Kind == KindImage {
		return res, fmt.Errorf("%w: image builds run as Kubernetes Jobs (--builds kubernetes); this worker runs builds as local processes, which have no image builder", ErrUnsupported)
	}
	if req.Jail == nil {
		return res, errors.New("build: this conversation has no sandbox to run the build in")
	}
	timeout := l.opts.Timeout
	if req.Timeout > 0 {
		timeout = min(req.Timeout, MaxTimeout)
	}
	out := req.Output
	if out == nil {
		out = io.Discard
	}
	argv := req.Spec.GradleArgv()
	env := append([]string{"CI=true"}, l.opts.Env...)
	cmd, err := req.Jail.Command(filepath.Join(req.Workspace, GradleWrapper), argv[1:], sandbox.Extra{
		Env: env, Dir: req.Workspace, Timeout: timeout, Limits: l.opts.Limits,
	})
	if err != nil {
		return res, fmt.Errorf("build: %w", err)
	}
	pr, pw, err := outpipe.New()
	if err != nil {
		return res, fmt.Errorf("build: %w", err)
	}
	defer pr.Close()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pw.Close()
		return res, fmt.Errorf("build: %w", err)
	}
	pw.Close() // the build's processes hold the write end now
	trace.SpanFromContext(ctx).AddEvent("process started")
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		io.Copy(out, pr)
	}()
	stop := context.AfterFunc(ctx, cmd.Stop)
	o, _ := cmd.Wait()
	stop()
	pr.Finish(readDone)
	res.Duration = time.Since(began)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	res.Status, res.ExitCode, res.Reason = localStatus(o, timeout)
	res.Tests, err = CollectTests(req.Workspace, began.Add(-reportSlack))
	return res, err
}

// reportSlack allows for file systems whose modification times are coarser
// than the clock (or, on a shared volume, for a builder's clock a little
// behind the worker's).
const reportSlack = 2 * time.Second

func localStatus(o sandbox.Outcome, timeout time.Duration) (Status, int, string) {
	switch {
	case o.Ending == sandbox.EndTimeout:
		return TimedOut, -1, fmt.Sprintf("the build ran past its time limit of %v; it and its processes were killed", timeout)
	case o.Ending == sandbox.EndMemory:
		return Killed, -1, "the build's processes used more memory than the sandbox allows; they were all killed"
	case o.Ending == sandbox.EndProcs:
		return Killed, -1, "the build ran more processes at once than the sandbox allows; they were all killed"
	case o.Signal == syscall.SIGXFSZ:
		return Killed, -1, "a file grew past the sandbox's file size limit"
	case o.Signal != 0:
		return Failed, -1, "terminated by signal " + o.Signal.String()
	case o.ExitCode != 0:
		return Failed, o.ExitCode, fmt.Sprintf("exit status %d", o.ExitCode)
	}
	return Succeeded, 0, ""
}
