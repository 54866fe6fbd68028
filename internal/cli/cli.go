// Package cli is the command-line conventions talkide's command packages
// share: the process's stdio and signals, usage errors and exit codes,
// command groups, flags set from the environment, and the tables and
// times they print.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/talkide/platform/internal/contract"
)

// Stdio is what a command reads from and writes to, and the signals sent
// to the process; tests pass buffers, and a channel of their own or none.
type Stdio struct {
	In       io.Reader
	Out, Err io.Writer
	Signals  <-chan os.Signal
}

// UntilSignal returns a context that ends with parent or at the first
// signal, and a channel that receives every signal after that one (a
// second Ctrl-C). stop ends both and waits for the goroutine that watches
// sigs; the command that called it owns them.
// Without signals it returns a cancellable parent and a nil channel.
func UntilSignal(parent context.Context, sigs <-chan os.Signal) (_ context.Context, later <-chan os.Signal, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	if sigs == nil {
		return ctx, nil, cancel
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	stop = sync.OnceFunc(func() { cancel(); close(done); wg.Wait() })
	next := make(chan os.Signal, 4)
	wg.Go(func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
			return
		}
		for {
			select {
			case s := <-sigs:
				select {
				case next <- s:
				default: // nobody is listening for more
				}
			case <-done:
				return
			}
		}
	})
	return ctx, next, stop
}

// Exit codes: a usage error (unknown command or flag, a missing argument)
// is 2, as for the shells and flag packages scripts know; any other
// failure is 1.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// UsageError is a command line the tree cannot run. Its message is one
// line; help marks an error after which the help text was shown.
type UsageError struct {
	path string // the command's path, "talkide admin budget"
	msg  string
	help bool
}

func (e *UsageError) Error() string { return e.msg }

// Is makes a usage error after which help was shown an flag.ErrHelp, as
// the flag package reports a request for help.
func (e *UsageError) Is(target error) bool { return e.help && target == flag.ErrHelp }

// Usagef returns a usage error of cmd.
func Usagef(cmd *cobra.Command, format string, args ...any) *UsageError {
	return &UsageError{path: cmd.CommandPath(), msg: fmt.Sprintf(format, args...)}
}

// ShownError is a failure the command's own output has already shown the
// user (talkide chat -m's failed turn): it exits 1 like any other, but
// Execute does not print it again.
type ShownError struct{ Err error }

func (e *ShownError) Error() string { return e.Err.Error() }
func (e *ShownError) Unwrap() error { return e.Err }

// Execute runs the command line args on root and returns the exit code,
// having written any error to stderr.
func Execute(ctx context.Context, root *cobra.Command, args []string, stderr io.Writer) int {
	cmd, err := runCommand(ctx, root, args)
	if err == nil {
		return ExitOK
	}
	if ue, ok := errors.AsType[*UsageError](err); ok {
		fmt.Fprintf(stderr, "%s: %s\n", ue.path, ue.msg)
		if !ue.help {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", ue.path)
		}
		return ExitUsage
	}
	if _, ok := errors.AsType[*ShownError](err); ok {
		return ExitError
	}
	path := root.Name()
	if cmd != nil {
		path = cmd.CommandPath()
	}
	fmt.Fprintf(stderr, "%s: %v\n", path, err)
	return ExitError
}

// Run runs the command line args on root and returns its error; tests
// call it.
func Run(ctx context.Context, root *cobra.Command, args []string) error {
	_, err := runCommand(ctx, root, args)
	return err
}

func runCommand(ctx context.Context, root *cobra.Command, args []string) (*cobra.Command, error) {
	prepare(root)
	root.SetArgs(NormalizeArgs(root, args))
	cmd, err := root.ExecuteContextC(ctx)
	// A value a rule refused is a usage error, named as the command's flag.
	if fe, ok := err.(*contract.FieldError); ok && cmd != nil && cmd.Flags().Lookup(fe.Field) != nil {
		err = Usagef(cmd, "%s", fe.Rename("--"+fe.Field))
	}
	return cmd, err
}

// prepare makes root report errors as Execute does, and set bound flags
// from the environment before any command runs.
func prepare(root *cobra.Command) {
	root.SilenceErrors, root.SilenceUsage = true, true
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return applyEnv(cmd) }
	root.SetFlagErrorFunc(flagError)
	if root.RunE == nil && root.Run == nil {
		root.Args, root.RunE = cobra.ArbitraryArgs, groupRun
	}
}

// NewGroup returns a command that only holds subcommands. Run bare, it
// shows its help and fails as a usage error; with an unknown subcommand it
// names the nearest one.
func NewGroup(use, short string, subs ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{Use: use, Short: short, Args: cobra.ArbitraryArgs, RunE: groupRun}
	g.AddCommand(subs...)
	return g
}

func groupRun(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		cmd.SetOut(cmd.ErrOrStderr())
		cmd.Help()
		return &UsageError{path: cmd.CommandPath(), msg: "missing command", help: true}
	}
	msg := fmt.Sprintf("unknown command %q", args[0])
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return Usagef(cmd, "%s", msg)
}

// NoArgs refuses positional arguments: a flag after a stray word would
// otherwise be silently ignored.
func NoArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return Usagef(cmd, "unexpected argument %q (this command takes flags only; see --help)", args[0])
	}
	return nil
}

var unknownFlagRe = regexp.MustCompile(`^unknown flag: --([^ =]+)`)

// flagError makes a flag parse failure a usage error, naming the nearest
// flag when one is close to a misspelt one.
func flagError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	if m := unknownFlagRe.FindStringSubmatch(msg); m != nil {
		if near := nearestFlag(cmd, m[1]); near != "" {
			msg += fmt.Sprintf(" (did you mean --%s?)", near)
		}
	}
	return Usagef(cmd, "%s", msg)
}

// nearestFlag returns the long flag of cmd closest to name, if it is close
// enough to be a misspelling of it.
func nearestFlag(cmd *cobra.Command, name string) string {
	best, bestD := "", 1<<30
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		if d := editDistance(name, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	})
	if bestD <= max(2, len(name)/3) {
		return best
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

var singleDashLong = regexp.MustCompile(`^-([a-z][a-z0-9]*(?:-[a-z0-9]+)+|[a-z]{2,})(=.*)?$`)

// NormalizeArgs rewrites "-name" to "--name" for every long flag of the
// tree. The first version parsed flags with the standard flag package,
// which takes both forms, and scripts written then must keep working.
// Shorthands (-m, -v, -h) are single letters and never match.
func NormalizeArgs(root *cobra.Command, args []string) []string {
	long := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) { long[f.Name] = true })
		c.PersistentFlags().VisitAll(func(f *pflag.Flag) { long[f.Name] = true })
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	long["help"], long["version"] = true, true
	out := slices.Clone(args)
	for i, a := range out {
		if a == "--" {
			break
		}
		if m := singleDashLong.FindStringSubmatch(a); m != nil && long[m[1]] {
			out[i] = "-" + a
		}
	}
	return out
}
