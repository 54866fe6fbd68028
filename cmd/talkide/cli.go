package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/talkide/platform/internal/admincmd"
	"github.com/talkide/platform/internal/cli"
)

// The command tree is built on spf13/cobra, the convention of kubectl, helm
// and kind: help generated from the flags at every level, shell completion
// built in, suggestions for misspelt commands. docs/cli.md says why in full.
// What the command packages share (usage errors, exit codes, flags from
// the environment) is internal/cli.

// stdio is what a command reads from and writes to, and the signals sent
// to the process; tests pass buffers, and a channel of their own or none.
type stdio struct {
	in       io.Reader
	out, err io.Writer
	signals  <-chan os.Signal
}

// lib is std as the command packages take it: cli.Stdio, the same fields
// exported (this package's tests build stdio values by these names).
func (s stdio) lib() cli.Stdio {
	return cli.Stdio{In: s.in, Out: s.out, Err: s.err, Signals: s.signals}
}

const (
	exitOK    = cli.ExitOK
	exitError = cli.ExitError
	exitUsage = cli.ExitUsage
)

// execute runs the command line args and returns the exit code, having
// written any error to std.err.
func execute(ctx context.Context, args []string, std stdio) int {
	return cli.Execute(ctx, newRoot(std), args, std.err)
}

// run runs the command line args and returns its error; tests call it.
func run(ctx context.Context, args []string, std stdio) error {
	return cli.Run(ctx, newRoot(std), args)
}

// newRoot builds the whole command tree.
func newRoot(std stdio) *cobra.Command {
	root := cli.NewGroup("talkide", "The TalkIDE platform: the control-plane and agent worker that host Mara")
	root.Long = `The TalkIDE platform: one binary, several roles.

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
the flag's help names it ([$TALKIDE_…]). See docs/cli.md.`
	root.Version = version()
	root.SetIn(std.in)
	root.SetOut(std.out)
	root.SetErr(std.err)
	root.SetVersionTemplate("talkide {{.Version}}\n")
	root.CompletionOptions.HiddenDefaultCmd = false
	root.AddCommand(
		newDevCmd(std),
		newChatCmd(std),
		newLoginCmd(std),
		newControlPlaneCmd(std),
		newWorkerCmd(std),
		admincmd.New(std.lib()),
		admincmd.NewSessions(std.lib()),
		newSandboxCmd(std),
		newSimulatorCmd(std),
	)
	return root
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
	cli.BindEnv(fs, "log-format", "log-level")
}

// logger returns the process logger the flags describe, writing to w.
func (l *logFlags) logger(cmd *cobra.Command, w io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(l.level)); err != nil {
		return nil, cli.Usagef(cmd, "--log-level %q: want debug, info, warn or error", l.level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch l.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, cli.Usagef(cmd, "--log-format %q: want text or json", l.format)
}
