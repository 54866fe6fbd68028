package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/secretenv"
)

func newDevCmd(std stdio) *cobra.Command {
	var (
		cfg     roles.DevConfig
		streams streamFlags
		gateway gatewayFlags
		logs    logFlags
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole platform on this machine: control-plane, one worker, the model simulator",
		Long: `Run the whole platform on this machine: the control-plane on a loopback
address, one worker (tenant "local", env "dev"), embedded SQLite, sessions and
workspaces under --data-dir, and, without ANTHROPIC_API_KEY, the built-in model
simulator (a test and demo tool, not a real model). The browser API serves one
local user, "local", without credentials. DATA-DIR/dev.json names the URL of
every part. Ctrl-C stops everything; a second Ctrl-C stops running turns at
once instead of waiting for them.`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := logs.logger(cmd, std.err)
			if err != nil {
				return err
			}
			if cfg.Bounds, err = bounds(cmd, streams, gateway); err != nil {
				return err
			}
			if err := cfg.Agent.Check(); err != nil {
				return err
			}
			cfg.Logger = logger
			if cfg.Telemetry, err = telemetryConfig(); err != nil {
				return err
			}
			return runDev(cmd.Context(), cfg, std)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&cfg.DataDir, "data-dir", "./.talkide", "directory for the database, secrets, sessions and workspaces")
	fs.StringVar(&cfg.Addr, "addr", "127.0.0.1:7878", "loopback HOST:PORT of the browser API")
	fs.StringVar(&cfg.AnthropicURL, "anthropic-url", "https://api.anthropic.com", "Anthropic API base URL (used when ANTHROPIC_API_KEY is set)")
	fs.BoolVar(&cfg.TraceFile, "trace-file", false, "record every span as a JSON line in DATA-DIR/traces.jsonl, for talkide admin trace TURN_ID (docs/observability.md)")
	cli.BindEnv(fs, "data-dir", "addr", "anthropic-url", "trace-file")
	registerAgentFlags(fs, &cfg.Agent)
	registerStreamFlags(fs, &streams)
	registerGatewayFlags(fs, &gateway)
	logs.add(fs)
	return cmd
}

func runDev(parent context.Context, cfg roles.DevConfig, std stdio) error {
	ctx, later, stop := cli.UntilSignal(parent, std.signals)
	defer stop()
	logger := cfg.Logger
	// The key was handed over at start (internal/secretenv): no
	// environment of this process or of what it starts holds it.
	cfg.APIKey = secretenv.Get("ANTHROPIC_API_KEY")
	os.Unsetenv("ANTHROPIC_API_KEY") // a process that did not re-execute (a test)
	roles.PrepareProcess(logger)

	st, err := roles.StartDev(ctx, cfg)
	if err != nil {
		return err
	}
	model := "the real Anthropic API at " + cfg.AnthropicURL
	if st.Simulator != nil {
		model = "the MODEL SIMULATOR (a test and demo tool, not a real model) at " + st.Info.Simulator
	}
	fmt.Fprintf(std.out, "TalkIDE dev is running.\n  browser API: %s (user %q, no login on loopback)\n  model:       %s\n  state:       %s\n  chat:        %s chat --data-dir %s\nPress Ctrl-C to stop.\n",
		st.Info.ControlPlane, roles.DevUser, model, cfg.DataDir, selfCommand(), cfg.DataDir)
	fatal := st.Wait(ctx)
	if fatal != nil {
		logger.Error("shutting down: a part failed", "err", fatal)
	}
	return errors.Join(fatal, st.Shutdown(parent, later))
}

// selfCommand is how the user can run this binary again: "go run
// ./cmd/talkide" when it was started by go run, else the name it was
// started by.
func selfCommand() string {
	exe, _ := os.Executable()
	var arg0 string
	if len(os.Args) > 0 {
		arg0 = os.Args[0]
	}
	return runAgain(exe, arg0)
}

// goRunCached matches the directory of an executable go run runs from the
// build cache (Go 1.24 on): GOCACHE/xx/HASH-d/talkide.
var goRunCached = regexp.MustCompile(`^[0-9a-f]{64}-d$`)

// runAgain is selfCommand's answer for the executable's path and the name
// it was started by. go run builds into a temporary go-build directory, or
// runs the executable from the build cache, which is a go-build directory
// too unless GOCACHE moved it; either way that path is no command for the
// user to type.
func runAgain(exe, arg0 string) string {
	if strings.Contains(exe, string(filepath.Separator)+"go-build") || goRunCached.MatchString(filepath.Base(filepath.Dir(exe))) {
		return "go run ./cmd/talkide"
	}
	if arg0 != "" {
		return arg0
	}
	return "talkide"
}
