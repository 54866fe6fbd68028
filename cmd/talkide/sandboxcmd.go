package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/sandbox"
)

// talkide sandbox check and run: what an operator uses to see what a
// machine gives the agent's commands, and to try one by hand.

func newSandboxCmd(std stdio) *cobra.Command {
	g := cli.NewGroup("sandbox", "See and try the sandbox the agent's commands run in",
		newSandboxCheckCmd(std), newSandboxRunCmd(std))
	g.Long = `See and try the sandbox the agent's commands run in (docs/sandbox.md):
"check" says which layers this machine gives every command, "run" runs one
command in a workspace as a conversation's Bash would.`
	return g
}

func newSandboxCheckCmd(std stdio) *cobra.Command {
	var mode, helper string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Say which sandbox layers this machine gives the agent's commands",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sb, err := newCLISandbox(cmd, mode, helper)
			if err != nil {
				return err
			}
			defer sb.Close()
			if u := sb.Unavailable(); u != nil {
				fmt.Fprintf(std.out, "mode %s: agent commands are REFUSED here: %v\n", sb.Mode(), u)
				return errors.New("no sandbox can be applied on this machine")
			}
			if sb.Mode() == sandbox.ModeNone {
				fmt.Fprintln(std.out, "mode none: agent commands run WITHOUT a sandbox")
				return nil
			}
			fmt.Fprintf(std.out, "mode %s: every agent command gets %s\n", sb.Mode(), strings.Join(sb.Layers(), ", "))
			fmt.Fprintf(std.out, "helper: %s\n", sb.Helper())
			if sb.CPUGroups() {
				fmt.Fprintln(std.out, "cpu: a cgroup per command, all of one weight: the CPU is shared between commands")
			} else {
				fmt.Fprintln(std.out, "cpu: no cgroup per command: commands share the CPU by thread, at nice 5")
			}
			fmt.Fprintf(std.out, "read-only: %s\n", strings.Join(sb.ReadOnly(), " "))
			return nil
		},
	}
	cmd.Flags().StringVar(&mode, "sandbox", "auto", "the mode to check: auto, landlock or none")
	cmd.Flags().StringVar(&helper, "sandbox-helper", "", "the helper to check (default: as a worker finds it)")
	return cmd
}

func newSandboxRunCmd(std stdio) *cobra.Command {
	var (
		mode, workspace, helper string
		timeout                 time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run [flags] -- COMMAND [ARG…]",
		Short: "Run one command in the sandbox, in a workspace, as a conversation's Bash would",
		Example: `  talkide sandbox run --workspace /tmp/ws -- ls -la /
  talkide sandbox run --workspace /tmp/ws -- sh -c 'cat /etc/hostname; id'`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if workspace == "" {
				return cli.Usagef(cmd, "--workspace is required")
			}
			ws, err := filepath.Abs(workspace)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(ws, 0o755); err != nil {
				return err
			}
			sb, err := newCLISandbox(cmd, mode, helper)
			if err != nil {
				return err
			}
			defer sb.Close()
			c, err := sb.Command(sandbox.Policy{
				Path: args[0], Args: args[1:], Workspace: ws, Timeout: timeout,
				Env: sandbox.BaseEnv(ws),
			})
			if err != nil {
				return err
			}
			c.Stdin, c.Stdout, c.Stderr = std.in, std.out, std.err
			ctx, _, stop := cli.UntilSignal(cmd.Context(), std.signals)
			defer stop()
			o, err := c.Run(ctx)
			if err != nil {
				if errors.Is(err, sandbox.ErrUnavailable) {
					return err
				}
				return fmt.Errorf("%v (%s)", err, o.Ending)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&mode, "sandbox", "auto", "auto, landlock or none")
	fs.StringVar(&workspace, "workspace", "", "the workspace the command runs in and may change (created if missing; required)")
	fs.DurationVar(&timeout, "timeout", 2*time.Minute, "the wall-clock limit")
	fs.StringVar(&helper, "sandbox-helper", "", "the sandbox's helper (default: as a worker finds it)")
	return cmd
}

// newCLISandbox is the sandbox a worker would make in mode, with helper
// or the one a worker finds (a fallback is said on stderr).
func newCLISandbox(cmd *cobra.Command, mode, helper string) (*sandbox.Sandbox, error) {
	m, err := sandbox.ParseMode(mode)
	if err != nil {
		return nil, cli.Usagef(cmd, "--sandbox %q: %v", mode, err)
	}
	explicit := helper != ""
	if m != sandbox.ModeNone && !explicit {
		log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
		helper = roles.SandboxHelper("", log)
	}
	// One command, so no helper is started ahead of it: the next would
	// never be used.
	sb, err := sandbox.New(&sandbox.Options{Mode: m, Helper: helper, Cold: true})
	if err != nil && explicit {
		return nil, fmt.Errorf("--sandbox-helper: %w", err)
	}
	return sb, err
}
