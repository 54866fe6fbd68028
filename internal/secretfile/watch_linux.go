//go:build linux

package secretfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchMask is what the directory's watch asks the kernel for. IN_MODIFY
// is left out on purpose: it fires for every write(2) to any file in the
// directory, so a database beside the file would wake the watcher once a
// page. A writer that edits the file in place closes it after writing,
// which IN_CLOSE_WRITE sees; a replace or the kubelet's swap is a create,
// a rename or a delete. IN_ONLYDIR refuses a path that is not a
// directory rather than watching something else.
const watchMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE |
	unix.IN_CLOSE_WRITE | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// watchDir watches dir with inotify and wakes C for each event whose name
// keep accepts (the empty name is the directory itself).
func watchDir(dir string, keep func(name string) bool, log *slog.Logger) (*dirWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, watchMask); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify_add_watch %s: %w", dir, err)
	}
	// A non-blocking descriptor handed to os.NewFile joins the runtime's
	// poller: Read parks the goroutine instead of a thread, and Close
	// wakes a Read in progress, which is how stop ends the goroutine.
	file := os.NewFile(uintptr(fd), "inotify "+dir)
	var once sync.Once
	closeFile := func() { once.Do(func() { file.Close() }) }
	c := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(c)
		defer closeFile()
		readEvents(file, dir, keep, c, log)
	}()
	return &dirWatch{C: c, stop: func() { closeFile(); <-done }}, nil
}

// readEvents reads the watch's events until the file is closed or the
// watch ends.
func readEvents(file *os.File, dir string, keep func(string) bool, c chan<- struct{}, log *slog.Logger) {
	// Room for many events at their largest: the kernel refuses a read
	// that cannot hold the next whole event.
	buf := make([]byte, 32*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := file.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				log.Warn("secretfile: reading the directory's events failed, polling only", "dir", dir, "err", err)
			}
			return
		}
		ended := ""
		eachEvent(buf[:n], func(mask uint32, name string) {
			wake, why := judge(mask, name, keep)
			if wake {
				notify(c)
			}
			if why != "" && ended == "" {
				ended = why
			}
		})
		if ended != "" {
			log.Warn("secretfile: the directory's watch ended, polling only", "dir", dir, "why", ended)
			return
		}
	}
}

// judge says what one event means: whether the file may have changed,
// and, when the watch is over, why.
func judge(mask uint32, name string, keep func(string) bool) (wake bool, ended string) {
	switch {
	case mask&unix.IN_Q_OVERFLOW != 0:
		// The kernel's queue filled and dropped events, some of which may
		// have been the file's.
		return true, ""
	case mask&unix.IN_IGNORED != 0:
		// The kernel removed the watch: the directory was deleted or its
		// file system unmounted. Nothing more will come.
		return true, "the directory was removed or unmounted"
	case mask&unix.IN_MOVE_SELF != 0:
		// The watch follows the directory to its new name, so its events
		// no longer say anything about the path being read.
		return true, "the directory was moved"
	}
	return keep(name), ""
}

// Offsets of the fields read from a struct inotify_event, which the
// kernel writes in the machine's byte order.
const (
	maskOffset = unsafe.Offsetof(unix.InotifyEvent{}.Mask)
	lenOffset  = unsafe.Offsetof(unix.InotifyEvent{}.Len)
)

// eachEvent calls fn for each struct inotify_event in buf with its mask
// and name (empty for an event on the watched directory itself; the
// kernel pads a name with NULs).
func eachEvent(buf []byte, fn func(mask uint32, name string)) {
	for len(buf) >= unix.SizeofInotifyEvent {
		mask := binary.NativeEndian.Uint32(buf[maskOffset:])
		end := unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[lenOffset:]))
		if end > len(buf) {
			return // never from the kernel, which hands out whole events
		}
		name := buf[unix.SizeofInotifyEvent:end]
		for i, b := range name {
			if b == 0 {
				name = name[:i]
				break
			}
		}
		fn(mask, string(name))
		buf = buf[end:]
	}
}
