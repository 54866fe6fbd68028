package roles

import (
	"log/slog"

	"github.com/talkide/platform/internal/fdlimit"
)

// RaiseFileLimit raises the soft RLIMIT_NOFILE to the hard limit, which
// every long-running role (controlplane, worker, dev) does first thing:
// a server holding a connection per browser stream reaches a shell's soft
// limit long before the ceiling its administrator set. It logs the limit
// in force once.
func RaiseFileLimit(logger *slog.Logger) {
	n, err := fdlimit.Raise()
	if err != nil {
		logger.Warn("could not raise the open-file limit to its hard limit", "nofile", n, "err", err)
		return
	}
	logger.Info("open-file limit", "nofile", n, "max_connections", fdlimit.MaxConns(n))
}
