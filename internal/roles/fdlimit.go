package roles

import (
	"log/slog"

	"github.com/talkide/platform/internal/fdlimit"
	"github.com/talkide/platform/internal/secretenv"
)

// PrepareProcess readies the process for a long-running role
// (controlplane, worker, dev), first thing. It makes the process
// undumpable, so that another process of its user (an agent command run
// without a sandbox) cannot read its memory, environment and descriptors
// through /proc; and it raises the soft RLIMIT_NOFILE to the hard limit:
// a server holding a connection per browser stream reaches a shell's soft
// limit long before the ceiling its administrator set. What it cannot do
// it logs as a warning; the limit in force it logs once.
func PrepareProcess(logger *slog.Logger) {
	if err := secretenv.Undumpable(); err != nil {
		logger.Warn("the process stays dumpable: its /proc files are readable to its own user", "err", err)
	}
	n, err := fdlimit.Raise()
	if err != nil {
		logger.Warn("could not raise the open-file limit to its hard limit", "nofile", n, "err", err)
		return
	}
	logger.Info("open-file limit", "nofile", n, "max_connections", fdlimit.MaxConns(n))
}
