// Package secretfile keeps the latest contents of a file from a mounted
// Kubernetes Secret: it watches the file's directory (with a periodic poll
// as a fallback) and caches the last good read, so a reader never fails
// while the kubelet swaps the ..data symlink under it.
//
// The directory is watched rather than the file because the kubelet never
// writes the file: it renames a new ..data symlink over the old one. Only
// an event that names the file, a kubelet entry (a name starting with
// ".."), or the directory itself leads to a read; the rest of the
// directory is somebody else's business. That matters because the
// control-plane keeps its secrets file next to its SQLite database: on
// Linux the watch is raw inotify without IN_MODIFY, so the database's page
// writes (to files SQLite keeps open) send no event at all and wake
// nothing, while IN_CLOSE_WRITE still sees an edit in place and the
// create, rename, delete and attribute events see a replace or a swap.
// Other systems use fsnotify with the same filter on names. When the
// watch cannot be set up, or the directory goes away or moves, the poll
// alone carries on.
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
	"sync/atomic"
	"time"

	"github.com/talkide/platform/internal/defaults"
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
	watch    *dirWatch // nil: polling only

	mu      sync.Mutex // guards value and loadErr
	value   string
	loadErr error

	reloads atomic.Int64 // reads of the file, so a test can count them
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

	// onEvent, when set, sees the name of every event from the directory
	// watch before the filter on names: a test's view of what woke the
	// watcher.
	onEvent func(name string)
}

// Watch is Open and Run in a goroutine of its own, which ends when ctx
// does; a role runs Run in a goroutine it owns and waits for instead.
func Watch(ctx context.Context, path string, opts *Options) (*File, error) {
	f, err := Open(path, opts)
	if err != nil {
		return nil, err
	}
	go f.Run(ctx)
	return f, nil
}

// Open reads path, which must be readable and non-empty now, and starts
// watching its directory; Run must follow, which keeps the file up to
// date and ends the watch.
func Open(path string, opts *Options) (*File, error) {
	o := defaults.Copy(opts)
	defaults.IfNotPositive(&o.Poll, DefaultPoll)
	defaults.Logger(&o.Logger)
	f := &File{path: path, poll: o.Poll, log: o.Logger, onChange: o.OnChange}
	if _, err := f.reload(); err != nil {
		return nil, err
	}
	// The watch starts here, not in Run: a change made once Open has
	// returned is seen.
	base := filepath.Base(path)
	w, err := watchDir(filepath.Dir(path), func(name string) bool {
		if o.onEvent != nil {
			o.onEvent(name)
		}
		return concerns(base, name)
	}, f.log)
	if err != nil {
		f.log.Warn("secretfile: cannot watch the directory, polling only", "path", path, "err", err)
		w = nil
	}
	f.watch = w
	return f, nil
}

// Run re-reads the file after each event in its directory that concerns
// it, and every Poll, until ctx ends; it returns nil then.
func (f *File) Run(ctx context.Context) error {
	f.run(ctx, f.watch)
	return nil
}

// Close ends the watch of a File whose Run is never called (a start
// that failed after Open).
func (f *File) Close() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.run(ctx, f.watch)
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
	f.reloads.Add(1)
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

// concerns reports whether an event in the directory, named name (empty
// for the directory itself), may have changed the file called base: the
// file itself, or the kubelet's ..data symlink, its ..data_tmp and its
// timestamped ..2026_… directories, through which the file resolves.
func concerns(base, name string) bool {
	return name == "" || name == base || strings.HasPrefix(name, "..")
}

// dirWatch is a watch on the file's directory. C receives after events
// that concern the file (several events may come as one, but never
// before the last of them happened) and is closed when the watch ends on
// its own, having said why in the log. stop ends it and returns once its
// goroutine has.
type dirWatch struct {
	C    <-chan struct{}
	stop func()
}

// notify wakes the reader of c without ever blocking the watch: a wake
// already pending covers this event too, as the read it causes comes
// after it.
func notify(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// run re-reads the file after each event from w (nil: none) and on every
// poll, until ctx ends.
func (f *File) run(ctx context.Context, w *dirWatch) {
	var events <-chan struct{}
	if w != nil {
		defer w.stop()
		events = w.C
	}
	t := time.NewTicker(f.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-events:
			if !ok {
				events = nil // the watch ended and said why; the poll goes on
				continue
			}
			if err := f.refresh(); err != nil {
				f.log.Debug("secretfile: read after an event failed, keeping the last contents", "err", err)
			}
		case <-t.C:
			if err := f.refresh(); err != nil {
				f.log.Warn("secretfile: read failed, keeping the last contents", "err", err)
			}
		}
	}
}
