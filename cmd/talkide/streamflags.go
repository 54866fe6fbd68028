package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/roles"
)

// streamFlags are the caps on browser event streams; talkide controlplane
// and talkide dev share them. 0 is the control-plane's default.
type streamFlags struct {
	perUser, perConversation, total int
}

func registerStreamFlags(fs *pflag.FlagSet, f *streamFlags) {
	fs.IntVar(&f.perUser, "max-streams-per-user", controlplane.DefaultMaxStreamsPerUser, "browser event streams one user may hold open, counted on every replica sharing a PostgreSQL store; more are answered 429 (docs/operations.md)")
	fs.IntVar(&f.perConversation, "max-streams-per-conversation", controlplane.DefaultMaxStreamsPerConversation, "browser event streams open on one conversation, counted on every replica sharing a PostgreSQL store; more are answered 429")
	fs.IntVar(&f.total, "max-streams", 0, "browser event streams open on this replica in total; more are answered 503 (0: derived from the open-file limit, at most 20000)")
	cli.BindEnv(fs, "max-streams-per-user", "max-streams-per-conversation", "max-streams")
}

// check refuses a negative cap as a usage error naming its flag.
func (f streamFlags) check(cmd *cobra.Command) error {
	for name, v := range map[string]int{"max-streams-per-user": f.perUser, "max-streams-per-conversation": f.perConversation, "max-streams": f.total} {
		if v < 0 {
			return cli.Usagef(cmd, "--%s %d: a cap is a positive number (0 for --max-streams: derived from the open-file limit)", name, v)
		}
	}
	return nil
}

// bounds checks the stream caps and parses the gateway's body bounds into
// the roles' Bounds, which talkide dev and talkide controlplane take alike.
func bounds(cmd *cobra.Command, streams streamFlags, gw gatewayFlags) (roles.Bounds, error) {
	if err := streams.check(cmd); err != nil {
		return roles.Bounds{}, err
	}
	b := roles.Bounds{MaxStreamsPerUser: streams.perUser, MaxStreamsPerConversation: streams.perConversation, MaxStreams: streams.total}
	var err error
	b.MaxBody, b.MaxBuffered, err = gw.options(cmd)
	return b, err
}
