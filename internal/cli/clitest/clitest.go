// Package clitest runs a command tree's command lines in tests, on empty
// input, and gives back what they wrote.
package clitest

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/talkide/platform/internal/cli"
)

// RunFunc runs the command line args with std.
type RunFunc func(ctx context.Context, args []string, std cli.Stdio) error

// Run runs args with run and returns what it wrote to stdout and stderr.
func Run(run RunFunc, args ...string) (stdout, stderr string, err error) {
	var out, errb bytes.Buffer
	err = run(context.Background(), args, cli.Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	return out.String(), errb.String(), err
}

// Must is Run where an error fails the test, which shows the command line
// and what it wrote to stderr.
func Must(t testing.TB, run RunFunc, args ...string) (stdout, stderr string) {
	t.Helper()
	out, errs, err := Run(run, args...)
	if err != nil {
		t.Fatalf("talkide %s: %v\nstderr: %s", strings.Join(args, " "), err, errs)
	}
	return out, errs
}
