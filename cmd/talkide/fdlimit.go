package main

import (
	"log/slog"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/fdlimit"
)

// raiseFileLimit raises the soft RLIMIT_NOFILE to the hard limit, which
// every long-running role (controlplane, worker, dev) does first thing:
// a server holding a connection per browser stream reaches a shell's soft
// limit long before the ceiling its administrator set. It logs the limit
// in force once.
func raiseFileLimit(logger *slog.Logger) {
	n, err := fdlimit.Raise()
	if err != nil {
		logger.Warn("could not raise the open-file limit to its hard limit", "nofile", n, "err", err)
		return
	}
	logger.Info("open-file limit", "nofile", n, "max_connections", fdlimit.MaxConns(n))
}

// streamFlags are the caps on browser event streams; talkide controlplane
// and talkide dev share them. 0 is the control-plane's default.
type streamFlags struct {
	perUser, perConversation, total int
}

func registerStreamFlags(fs *pflag.FlagSet, f *streamFlags) {
	fs.IntVar(&f.perUser, "max-streams-per-user", controlplane.DefaultMaxStreamsPerUser, "browser event streams one user may hold open, counted on every replica sharing a PostgreSQL store; more are answered 429 (docs/operations.md)")
	fs.IntVar(&f.perConversation, "max-streams-per-conversation", controlplane.DefaultMaxStreamsPerConversation, "browser event streams open on one conversation, counted on every replica sharing a PostgreSQL store; more are answered 429")
	fs.IntVar(&f.total, "max-streams", 0, "browser event streams open on this replica in total; more are answered 503 (0: derived from the open-file limit, at most 20000)")
	bindEnv(fs, "max-streams-per-user", "max-streams-per-conversation", "max-streams")
}

// check refuses a negative cap as a usage error naming its flag.
func (f streamFlags) check(cmd *cobra.Command) error {
	for name, v := range map[string]int{"max-streams-per-user": f.perUser, "max-streams-per-conversation": f.perConversation, "max-streams": f.total} {
		if v < 0 {
			return usageErrorf(cmd, "--%s %d: a cap is a positive number (0 for --max-streams: derived from the open-file limit)", name, v)
		}
	}
	return nil
}
