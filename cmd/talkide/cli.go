package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/talkide/platform/internal/contract"
)

// The command tree is built on spf13/cobra, the convention of kubectl, helm
// and kind: help generated from the flags at every level, shell completion
// built in, suggestions for misspelt commands. docs/cli.md says why in full.

// stdio is what a command reads from and writes to, and the signals sent
// to the process; tests pass buffers, and a channel of their own or none.
type stdio struct {
	in       io.Reader
	out, err io.Writer
	signals  <-chan os.Signal
}

// untilSignal returns a context that ends with parent or at the first
// signal, and a channel that receives every signal after that one (a
// second Ctrl-C). stop ends both; the command that called it owns them.
// Without signals it returns a cancellable parent and a nil channel.
func untilSignal(parent context.Context, sigs <-chan os.Signal) (_ context.Context, later <-chan os.Signal, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	if sigs == nil {
		return ctx, nil, cancel
	}
	done := make(chan struct{})
	stop = sync.OnceFunc(func() { cancel(); close(done) })
	next := make(chan os.Signal, 4)
	go func() {
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
	}()
	return ctx, next, stop
}

// Exit codes: a usage error (unknown command or flag, a missing argument)
// is 2, as for the shells and flag packages scripts know; any other
// failure is 1.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError is a command line the tree cannot run. Its message is one
// line; help marks an error after which the help text was shown.
type usageError struct {
	path string // the command's path, "talkide admin budget"
	msg  string
	help bool
}

func (e *usageError) Error() string { return e.msg }

// Is makes a usage error after which help was shown an flag.ErrHelp, as
// the flag package reports a request for help.
func (e *usageError) Is(target error) bool { return e.help && target == flag.ErrHelp }

func usageErrorf(cmd *cobra.Command, format string, args ...any) *usageError {
	return &usageError{path: cmd.CommandPath(), msg: fmt.Sprintf(format, args...)}
}

// shownError is a failure the command's own output has already shown the
// user (talkide chat -m's failed turn): it exits 1 like any other, but
// execute does not print it again.
type shownError struct{ err error }

func (e *shownError) Error() string { return e.err.Error() }
func (e *shownError) Unwrap() error { return e.err }

// execute runs the command line args and returns the exit code, having
// written any error to std.err.
func execute(ctx context.Context, args []string, std stdio) int {
	cmd, err := runCommand(ctx, args, std)
	if err == nil {
		return exitOK
	}
	if ue, ok := errors.AsType[*usageError](err); ok {
		fmt.Fprintf(std.err, "%s: %s\n", ue.path, ue.msg)
		if !ue.help {
			fmt.Fprintf(std.err, "Run '%s --help' for usage.\n", ue.path)
		}
		return exitUsage
	}
	if _, ok := errors.AsType[*shownError](err); ok {
		return exitError
	}
	path := "talkide"
	if cmd != nil {
		path = cmd.CommandPath()
	}
	fmt.Fprintf(std.err, "%s: %v\n", path, err)
	return exitError
}

// run runs the command line args and returns its error; tests call it.
func run(ctx context.Context, args []string, std stdio) error {
	_, err := runCommand(ctx, args, std)
	return err
}

func runCommand(ctx context.Context, args []string, std stdio) (*cobra.Command, error) {
	root := newRoot(std)
	root.SetArgs(normalizeArgs(root, args))
	cmd, err := root.ExecuteContextC(ctx)
	// A value a rule refused is a usage error, named as the command's flag.
	if fe, ok := err.(*contract.FieldError); ok && cmd != nil && cmd.Flags().Lookup(fe.Field) != nil {
		err = usageErrorf(cmd, "%s", fe.Rename("--"+fe.Field))
	}
	return cmd, err
}

// newRoot builds the whole command tree.
func newRoot(std stdio) *cobra.Command {
	root := &cobra.Command{
		Use:   "talkide",
		Short: "The TalkIDE platform: the control-plane and agent worker that host Mara",
		Long: `The TalkIDE platform: one binary, several roles.

  talkide dev            run everything on this machine (control-plane, worker, model simulator)
  talkide chat           talk to Mara from the terminal
  talkide login          store an API token for a shared control-plane's URL
  talkide controlplane   run the control-plane (browser API, gateway-proxy, mint, reports)
  talkide worker         run a tenant-env's agent worker
  talkide admin          operate tenant-envs, identity tokens, users, API tokens, budgets, usage, operator tokens
  talkide sessions       list, archive or delete sessions on a session volume
  talkide sandbox        see and try the sandbox the agent's commands run in
  talkide simulator      run the model simulator on its own (a test and demo tool, not a model)

Every flag can also be set by an environment variable where that is safe;
the flag's help names it ([$TALKIDE_…]). See docs/cli.md.`,
		Version:           version(),
		Args:              cobra.ArbitraryArgs,
		RunE:              groupRun,
		SilenceErrors:     true,
		SilenceUsage:      true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return applyEnv(cmd) },
	}
	root.SetIn(std.in)
	root.SetOut(std.out)
	root.SetErr(std.err)
	root.SetVersionTemplate("talkide {{.Version}}\n")
	root.SetFlagErrorFunc(flagError)
	root.CompletionOptions.HiddenDefaultCmd = false
	root.AddCommand(
		newDevCmd(std),
		newChatCmd(std),
		newLoginCmd(std),
		newControlPlaneCmd(std),
		newWorkerCmd(std),
		newAdminCmd(std),
		newSessionsCmd(std),
		newSandboxCmd(std),
		newSimulatorCmd(std),
	)
	return root
}

// newGroup returns a command that only holds subcommands. Run bare, it
// shows its help and fails as a usage error; with an unknown subcommand it
// names the nearest one.
func newGroup(use, short string, subs ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{Use: use, Short: short, Args: cobra.ArbitraryArgs, RunE: groupRun}
	g.AddCommand(subs...)
	return g
}

func groupRun(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		cmd.SetOut(cmd.ErrOrStderr())
		cmd.Help()
		return &usageError{path: cmd.CommandPath(), msg: "missing command", help: true}
	}
	return unknownCommand(cmd, args[0])
}

func unknownCommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q", name)
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return usageErrorf(cmd, "%s", msg)
}

// noArgs refuses positional arguments: a flag after a stray word would
// otherwise be silently ignored.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf(cmd, "unexpected argument %q (this command takes flags only; see --help)", args[0])
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
	return usageErrorf(cmd, "%s", msg)
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

// normalizeArgs rewrites "-name" to "--name" for every long flag of the
// tree. The first version parsed flags with the standard flag package,
// which takes both forms, and scripts written then must keep working.
// Shorthands (-m, -v, -h) are single letters and never match.
func normalizeArgs(root *cobra.Command, args []string) []string {
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

// envAnnotation marks a flag that an environment variable may set; its
// value is the variable's name.
const envAnnotation = "talkide_env"

// envName is the variable that sets flag name: TALKIDE_ and the name in
// upper case with '_' for '-'.
func envName(name string) string {
	return "TALKIDE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// bindEnv lets environment variables set the named flags of fs, and says
// so in their help. Only settings bind: where to find things and how to
// run. Flags that name what a command acts on (an id, a subject, an
// amount) or that make it destructive (--force) never do, so that a
// variable left in a shell cannot change what a command does to data.
func bindEnv(fs *pflag.FlagSet, names ...string) {
	for _, n := range names {
		f := fs.Lookup(n)
		if f == nil {
			panic("bindEnv: no flag --" + n)
		}
		v := envName(n)
		f.Usage += " [$" + v + "]"
		if f.Annotations == nil {
			f.Annotations = map[string][]string{}
		}
		f.Annotations[envAnnotation] = []string{v}
	}
}

// applyEnv sets every bound flag not given on the command line from its
// variable: the command line wins over the environment, which wins over
// the default.
func applyEnv(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		vs := f.Annotations[envAnnotation]
		if err != nil || f.Changed || len(vs) == 0 {
			return
		}
		v, ok := os.LookupEnv(vs[0])
		if !ok {
			return
		}
		if serr := f.Value.Set(v); serr != nil {
			err = usageErrorf(cmd, "$%s=%q (for --%s): %v", vs[0], v, f.Name, serr)
		}
	})
	return err
}

// version is the module version and VCS revision the binary was built
// from, as the Go toolchain records them.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ", modified"
			}
		}
	}
	if rev == "" {
		return fmt.Sprintf("%s (%s)", v, bi.GoVersion)
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if at != "" {
		at = ", " + at
	}
	return fmt.Sprintf("%s (revision %s%s%s, %s)", v, rev, at, dirty, bi.GoVersion)
}

// logFlags are the flags of the roles that log.
type logFlags struct{ format, level string }

func (l *logFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn, error")
	bindEnv(fs, "log-format", "log-level")
}

// logger returns the process logger the flags describe, writing to w.
func (l *logFlags) logger(cmd *cobra.Command, w io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(l.level)); err != nil {
		return nil, usageErrorf(cmd, "--log-level %q: want debug, info, warn or error", l.level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch l.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageErrorf(cmd, "--log-format %q: want text or json", l.format)
}
