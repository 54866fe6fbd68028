package main

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/talkide/platform/internal/anthropicsim"
	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/secretenv"
)

// talkide simulator: the model simulator as a process of its own, for a
// cluster or a demo where the control-plane's gateway needs an upstream
// and no real model may be used. It is a test and demo tool, not a model.

func newSimulatorCmd(std stdio) *cobra.Command {
	var (
		listenAddr string
		chunkDelay time.Duration
		logs       logFlags
	)
	cmd := &cobra.Command{
		Use:   "simulator",
		Short: "Run the model simulator, a test and demo tool that is NOT a model",
		Long: `Run the Anthropic Messages API simulator (docs/simulator.md) on its own: a
deterministic test and demo tool, NOT a model. Every reply says so. Point a
control-plane at it with --anthropic-url and give both the same
ANTHROPIC_API_KEY: the simulator checks it as the API does.`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := logs.logger(cmd, std.err)
			if err != nil {
				return err
			}
			key := secretenv.Get("ANTHROPIC_API_KEY")
			if key == "" {
				return cli.Usagef(cmd, "ANTHROPIC_API_KEY must name the key clients present")
			}
			ctx, _, stop := cli.UntilSignal(cmd.Context(), std.signals)
			defer stop()
			err = roles.RunSimulator(ctx, listenAddr, key, &anthropicsim.Options{Logger: logger, ChunkDelay: chunkDelay}, func(url string) {
				logger.Warn("the model SIMULATOR is serving: a test and demo tool, not a real model", "url", url)
			})
			if err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&listenAddr, "listen", "127.0.0.1:8080", "HOST:PORT to serve on")
	fs.DurationVar(&chunkDelay, "chunk-delay", 0, "pause before each streamed text delta, as a model's pace")
	cli.BindEnv(fs, "listen", "chunk-delay")
	logs.add(fs)
	return cmd
}
