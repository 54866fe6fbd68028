// Command talkide is the TalkIDE platform: one binary, several roles.
//
//	talkide dev           everything on one machine (control-plane, one worker, model simulator)
//	talkide controlplane  the control-plane (browser API, gateway-proxy, mint, reports)
//	talkide worker        the per-tenant-env agent worker
//	talkide chat          a terminal client of a conversation
//	talkide admin         operators: tenant-envs, identity tokens, worker Secrets, budgets, usage
//	talkide sessions      retention: list, archive, delete sessions
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: talkide <command> [flags]

commands:
  dev           run the whole platform on this machine (control-plane, worker, model simulator)
  controlplane  run the control-plane
  worker        run an agent worker
  chat          talk to a conversation from the terminal
  admin         operate: env add|list, token issue|revoke, budget set|get|delete|status, usage, operator-token
  sessions      list, archive or delete sessions on a session volume

Run "talkide <command> -h" for a command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	args := os.Args[2:]
	switch os.Args[1] {
	case "dev":
		err = runDev(ctx, args, os.Stdout, os.Stderr)
	case "controlplane":
		err = runControlPlane(ctx, args, os.Stderr)
	case "worker":
		err = runWorker(ctx, args, os.Stderr)
	case "chat":
		err = runChat(ctx, args, os.Stdin, os.Stdout, os.Stderr)
	case "admin":
		err = runAdmin(ctx, args, os.Stdout, os.Stderr)
	case "sessions":
		err = runSessions(ctx, args, os.Stdout, os.Stderr)
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "talkide: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "talkide %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// newLogger returns the process logger: text or JSON lines on w.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("bad --log-level %q", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("bad --log-format %q (text or json)", format)
}

// parseWithLogger adds the logging flags to fs, parses args, and returns the
// logger they describe, writing to w.
func parseWithLogger(fs *flag.FlagSet, args []string, w io.Writer) (*slog.Logger, error) {
	format := fs.String("log-format", "text", "log format: text or json")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return newLogger(w, *format, *level)
}

// registerAgentFlags adds the flags that shape the agent, which talkide dev
// and talkide worker share.
func registerAgentFlags(fs *flag.FlagSet, model, harness, claudeBin, toolPolicy, mcpAllow *string) {
	fs.StringVar(model, "model", "", "model id (default: the harness's default)")
	fs.StringVar(harness, "harness", "native", "agent harness: native (in-process) or claude-code (the Claude Code CLI; docs/harnesses.md)")
	fs.StringVar(claudeBin, "claude-code-bin", "claude", "the Claude Code CLI for --harness claude-code")
	fs.StringVar(toolPolicy, "tool-policy", "", "JSON file of tool allow/deny rules checked before every tool call (docs/tools.md)")
	fs.StringVar(mcpAllow, "mcp-allow", "", "JSON file of the MCP servers a workspace's .mcp.json may start (docs/mcp.md); default none")
}
