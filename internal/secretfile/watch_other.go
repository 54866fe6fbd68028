//go:build !linux

package secretfile

import (
	"errors"
	"log/slog"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

// watchDir watches dir with fsnotify and wakes C for each event whose name
// keep accepts (the empty name is the directory itself). fsnotify cannot
// leave out writes, so a busy file beside the watched one still wakes
// this goroutine, but no longer causes a read.
func watchDir(dir string, keep func(name string) bool, log *slog.Logger) (*dirWatch, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return nil, err
	}
	c := make(chan struct{}, 1)
	done := make(chan struct{})
	clean := filepath.Clean(dir)
	go func() {
		defer close(done)
		defer close(c)
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				name := ""
				if filepath.Clean(ev.Name) != clean {
					name = filepath.Base(ev.Name)
				}
				if keep(name) {
					notify(c)
				}
				if name == "" && ev.Has(fsnotify.Remove|fsnotify.Rename) {
					log.Warn("secretfile: the directory's watch ended, polling only", "dir", dir, "why", "the directory was removed or moved")
					return
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				if errors.Is(err, fsnotify.ErrEventOverflow) {
					notify(c) // events were lost; some may have been the file's
					continue
				}
				log.Warn("secretfile: watch error, polling continues", "dir", dir, "err", err)
			}
		}
	}()
	return &dirWatch{C: c, stop: func() { w.Close(); <-done }}, nil
}
