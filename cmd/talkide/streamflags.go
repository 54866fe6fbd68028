package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/roles"
)

// streamFlags are the caps on browser event streams, and the bounds on
// attached files' bytes held at once; talkide controlplane and talkide
// dev share them. 0 is the control-plane's default cap.
type streamFlags struct {
	perUser, perConversation, total int
	uploadMemory, uploadPerUser     string
}

func registerStreamFlags(fs *pflag.FlagSet, f *streamFlags) {
	fs.IntVar(&f.perUser, "max-streams-per-user", controlplane.DefaultMaxStreamsPerUser, "browser event streams one user may hold open, counted on every replica sharing a PostgreSQL store; more are answered 429 (docs/operations.md)")
	fs.IntVar(&f.perConversation, "max-streams-per-conversation", controlplane.DefaultMaxStreamsPerConversation, "browser event streams open on one conversation, counted on every replica sharing a PostgreSQL store; more are answered 429")
	fs.IntVar(&f.total, "max-streams", 0, "browser event streams open on this replica in total; more are answered 503 (0: derived from the open-file limit, at most 20000)")
	fs.StringVar(&f.uploadMemory, "max-upload-memory", size(controlplane.DefaultUploadMemory), "bytes of attached files this replica holds in memory at once, like 64Mi, each until the worker has stored it; a file beyond is answered 503 with Retry-After before it is read (docs/operations.md)")
	fs.StringVar(&f.uploadPerUser, "max-upload-memory-per-user", size(controlplane.DefaultUploadMemoryPerUser), "one user's share of --max-upload-memory; a file beyond it is answered 429 with Retry-After before it is read")
	cli.BindEnv(fs, "max-streams-per-user", "max-streams-per-conversation", "max-streams", "max-upload-memory", "max-upload-memory-per-user")
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

// bounds checks the stream caps and parses the upload and the gateway's
// body bounds into
// the roles' Bounds, which talkide dev and talkide controlplane take
// alike.
func bounds(cmd *cobra.Command, streams streamFlags, gw gatewayFlags) (roles.Bounds, error) {
	if err := streams.check(cmd); err != nil {
		return roles.Bounds{}, err
	}
	uploads, err := parseSizes(cmd, "max-upload-memory", streams.uploadMemory, "max-upload-memory-per-user", streams.uploadPerUser)
	if err != nil {
		return roles.Bounds{}, err
	}
	b := roles.Bounds{MaxStreamsPerUser: streams.perUser, MaxStreamsPerConversation: streams.perConversation, MaxStreams: streams.total,
		UploadMemory: uploads[0], UploadMemoryPerUser: uploads[1]}
	b.MaxBody, b.MaxBuffered, err = gw.options(cmd)
	return b, err
}
