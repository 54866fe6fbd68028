// Package secretfile keeps the latest contents of a file from a mounted
// Kubernetes Secret: it watches the mount directory (fsnotify, with a
// periodic poll as a fallback) and caches the last good read, so a reader
// never fails while the kubelet swaps the ..data symlink under it.
//
// The worker reads its identity token and command key files through it;
// the control-plane its secrets file (the keys that rotate by key id).
package secretfile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultPoll is how often the file is re-read even without an event
// (an event can be missed: a watch on a directory that is replaced, or a
// file system that sends none).
const DefaultPoll = 10 * time.Second

// File is one watched file. Get is safe for concurrent use.
type File struct {
	path     string
	poll     time.Duration
	log      *slog.Logger
	onChange func(string)

	mu      sync.Mutex // guards value and loadErr
	value   string
	loadErr error
}

// Options configure Watch; nil is the defaults.
type Options struct {
	Poll   time.Duration // default DefaultPoll
	Logger *slog.Logger  // nil does not log
	// OnChange, when set, is called with the new contents after each read
	// that found them changed (not for the first read, which Watch
	// returns), from the watching goroutine, one call at a time: a
	// reader that must act on a change (install a rotated key) does it
	// here rather than compare on every Get.
	OnChange func(string)
}

// Watch reads path (it must be readable and non-empty now) and keeps
// re-reading it when its directory changes or every Poll, until ctx ends.
func Watch(ctx context.Context, path string, opts *Options) (*File, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	f := &File{path: path, poll: o.Poll, log: o.Logger, onChange: o.OnChange}
	if _, err := f.reload(); err != nil {
		return nil, err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		f.log.Warn("secretfile: no file events, polling only", "path", path, "err", err)
		w = nil
	} else if err := w.Add(filepath.Dir(path)); err != nil {
		f.log.Warn("secretfile: cannot watch the directory, polling only", "path", path, "err", err)
	}
	go f.run(ctx, w)
	return f, nil
}

// Get returns the file's latest good contents, trimmed of surrounding
// white space. It fails only when no read ever succeeded... which Watch
// ruled out, so never in practice; the error is kept for the signature
// the worker's identity source has.
func (f *File) Get() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.value == "" {
		return "", f.loadErr
	}
	return f.value, nil
}

// Healthy reports the last read's error: nil while the file is readable.
// A readiness probe uses it (the token must be readable).
func (f *File) Healthy() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loadErr
}

// reload reads the file; a failed or empty read keeps the last good value.
// It reports whether a good read changed the value.
func (f *File) reload() (bool, error) {
	b, err := os.ReadFile(f.path)
	v := strings.TrimSpace(string(b))
	if err == nil && v == "" {
		err = errors.New("empty")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.loadErr = fmt.Errorf("secretfile: read %s: %w", f.path, err)
		return false, f.loadErr
	}
	changed := f.value != "" && f.value != v
	if changed {
		f.log.Info("secretfile: file changed, using the new contents", "path", f.path)
	}
	f.value, f.loadErr = v, nil
	return changed, nil
}

// refresh re-reads the file and tells OnChange of a change.
func (f *File) refresh() error {
	changed, err := f.reload()
	if changed && f.onChange != nil {
		f.onChange(f.current())
	}
	return err
}

func (f *File) current() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.value
}

func (f *File) run(ctx context.Context, w *fsnotify.Watcher) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		defer w.Close()
		events, errs = w.Events, w.Errors
	}
	t := time.NewTicker(f.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			// The kubelet writes a new timestamped directory, then renames
			// ..data_tmp over ..data: any event in the directory may be
			// that swap, so re-read on each.
			_ = ev
			if err := f.refresh(); err != nil {
				f.log.Debug("secretfile: read after an event failed, keeping the last contents", "err", err)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			f.log.Warn("secretfile: watch error, polling continues", "err", err)
		case <-t.C:
			if err := f.refresh(); err != nil {
				f.log.Warn("secretfile: read failed, keeping the last contents", "err", err)
			}
		}
	}
}
