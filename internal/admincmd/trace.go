package admincmd

import (
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/telemetry"
)

func newAdminTraceCmd(std cli.Stdio) *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "trace TURN_ID",
		Short: "Print a turn's spans from talkide dev --trace-file: where its time went",
		Long: `Print the span tree of a turn's trace, recorded by talkide dev --trace-file in
DATA-DIR/` + telemetry.TraceFileName + `: each span's start after the trace's first, its
duration, its name and what it measured (model, tokens, tool, outcome). The
turn id is in talkide chat -v's output and in the turn's events.`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return telemetry.PrintTurn(std.Out, filepath.Join(dataDir, telemetry.TraceFileName), args[0])
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultDevDataDir, "talkide dev's data directory")
	cli.BindEnv(cmd.Flags(), "data-dir")
	return cmd
}
