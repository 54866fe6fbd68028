package trust

import (
	"errors"
	"log/slog"
	"time"

	"github.com/talkide/platform/internal/secretfile"
)

// ErrNoCommandKey names where a worker's command key comes from, and
// never what was there.
var ErrNoCommandKey = errors.New("a command key (ID:BASE64, or base64 of at least 32 bytes) is required: --command-key-file or TALKIDE_WORKER_COMMAND_KEY")

// KeyFile is a worker's command key file (ID:BASE64, or bare base64 named
// by a default id), watched: when a rotation swaps in a new key, it
// verifies and signs at once, and the previous one keeps verifying for a
// grace, since the control-plane signs with it until its replacement has
// reached every worker.
type KeyFile struct {
	// First is the key the file held when it was opened.
	First Key
	// Ring follows the file while File runs.
	Ring *Keyring
	// File is the watched file: its Run keeps Ring in step.
	File *secretfile.File
}

// OpenKeyFile reads the key file at path; defaultID names a bare base64
// key, grace is how long a replaced key still verifies.
func OpenKeyFile(path, defaultID string, grace time.Duration, logger *slog.Logger) (*KeyFile, error) {
	if grace <= 0 {
		return nil, errors.New("--command-key-grace must be positive")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	kf := &KeyFile{}
	ready := make(chan struct{}) // Ring is set: a change can come before
	f, err := secretfile.Open(path, &secretfile.Options{Logger: logger, OnChange: func(text string) {
		<-ready
		k, err := ParseKey(text, defaultID)
		if err != nil {
			logger.Warn("the command key file changed but holds no valid key; keeping the keys in use", "err", err)
			return
		}
		now := time.Now()
		if err := kf.Ring.Set(Rotated(kf.Ring.Keys(), k, now.Add(grace), now)); err != nil {
			logger.Warn("the command key file changed but its key cannot be installed; keeping the keys in use", "err", err)
			return
		}
		logger.Info("command key rotated", "key_id", k.ID, "previous_verifies_for", grace)
	}})
	if err != nil {
		return nil, err
	}
	text, _ := f.Get()
	if kf.First, err = ParseKey(text, defaultID); err != nil {
		f.Close()
		return nil, ErrNoCommandKey
	}
	if kf.Ring, err = NewRotatingKeyring([]Key{kf.First}); err != nil {
		f.Close()
		return nil, err
	}
	kf.File = f
	close(ready)
	return kf, nil
}
