package tools

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// A read-only view of the workspace for people (the browser's file tree and
// viewer), confined exactly as the file tools are: every path goes through
// Resolve and every open through the root descriptor.

// ErrNotAFile is wrapped by the error for a path that names a directory, a
// device, a FIFO or a hard-linked file where a file is read, or a file
// where a directory is listed.
var ErrNotAFile = errors.New("not a file the view reads")

// TooLargeError is a file larger than a view's limit.
type TooLargeError struct {
	Size, Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the file is %d bytes, more than the %d shown", e.Size, e.Limit)
}

// Entry is one entry of a directory listing.
type Entry struct {
	Name    string
	Type    fs.FileMode // fs.ModeDir, fs.ModeSymlink, 0 for a regular file, or another type bit
	Size    int64
	ModTime time.Time
	// A symlink's Target (relative to the root) when it stays inside the
	// workspace, with TargetType the type of what is there and Broken when
	// nothing is; Outside when it leads out, and then no Target.
	Target     string
	TargetType fs.FileMode
	Broken     bool
	Outside    bool
}

// maxScanEntries bounds the entries read from one directory before
// sorting, so that a directory of millions costs a bounded amount.
const maxScanEntries = 10000

// List returns the entries of the directory p (relative to the root, "."
// for the root): directories first, then by name, at most max of them;
// truncated reports that there were more. Symlinks are not followed, only
// resolved to say where they lead. Errors wrap ErrOutsideWorkspace,
// fs.ErrNotExist or ErrNotAFile.
func (w *Workspace) List(p string, max int) (entries []Entry, truncated bool, err error) {
	real, err := w.Resolve(p)
	if err != nil {
		return nil, false, err
	}
	fi, err := w.stat(real)
	if err != nil {
		return nil, false, err
	}
	if !fi.IsDir() {
		return nil, false, fmt.Errorf("%w: it is not a directory", ErrNotAFile)
	}
	dir, err := w.openDir(real, fi)
	if err != nil {
		return nil, false, err
	}
	defer dir.Close()
	f, err := dir.Open(".")
	if err != nil {
		return nil, false, w.confined(p, err)
	}
	defer f.Close()
	des, err := f.ReadDir(maxScanEntries)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false, w.confined(p, err)
	}
	truncated = len(des) == maxScanEntries
	for _, de := range des {
		e := Entry{Name: de.Name(), Type: de.Type()}
		if info, err := de.Info(); err == nil {
			e.ModTime = info.ModTime()
			if info.Mode().IsRegular() {
				e.Size = info.Size()
			}
		}
		if e.Type&fs.ModeSymlink != 0 {
			target, err := w.Resolve(filepath.Join(real, e.Name))
			if err != nil {
				e.Outside = errors.Is(err, ErrOutsideWorkspace)
				e.Broken = !e.Outside // a loop
			} else {
				e.Target = filepath.ToSlash(w.Rel(target))
				if tfi, err := w.stat(target); err != nil {
					e.Broken = true
				} else {
					e.TargetType = tfi.Mode().Type()
				}
			}
		}
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b Entry) int {
		if ad, bd := a.Type.IsDir(), b.Type.IsDir(); ad != bd {
			if ad {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	if len(entries) > max {
		entries, truncated = entries[:max], true
	}
	return entries, truncated, nil
}

// ReadFile reads the file p (relative to the root) as Read opens it: a
// regular file with one hard link, through the root descriptor, at most
// limit bytes (a larger one is a *TooLargeError with its size, read no
// further). Errors wrap ErrOutsideWorkspace, fs.ErrNotExist or ErrNotAFile.
func (w *Workspace) ReadFile(p string, limit int64) ([]byte, fs.FileInfo, error) {
	real, err := w.Resolve(p)
	if err != nil {
		return nil, nil, err
	}
	return w.readReal(real, limit)
}

// readReal is ReadFile of real, a path from Resolve.
func (w *Workspace) readReal(real string, limit int64) ([]byte, fs.FileInfo, error) {
	f, fi, err := w.openRegular(real)
	if err != nil {
		if errors.Is(err, ErrIsDir) || errors.Is(err, errNotRegular) || errors.Is(err, ErrHardLinked) {
			err = fmt.Errorf("%w: %w", ErrNotAFile, err)
		}
		return nil, nil, err
	}
	defer f.Close()
	if fi.Size() > limit {
		return nil, fi, &TooLargeError{Size: fi.Size(), Limit: limit}
	}
	data, err := readLimited(f, fi.Size(), limit)
	if errors.Is(err, errTooLarge) { // it grew since it was opened
		return nil, fi, &TooLargeError{Size: max(fi.Size(), limit+1), Limit: limit}
	}
	return data, fi, err
}

// IsBinary reports whether data looks binary, as the file tools judge it:
// a NUL byte in its first 8 KiB.
func IsBinary(data []byte) bool {
	return slices.Contains(data[:min(len(data), binarySniffBytes)], 0)
}

// noFollowNonblock opens a file of the session volume: a symlink is not
// followed, and a FIFO does not block the open.
const noFollowNonblock = syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// ReadToolOutput reads the first limit bytes of the output kept as name
// (SpillDir/name) under stateDir, refusing a name that is not one the
// tools give (a call id's letters, digits, '-' and '_', then ".txt") and
// anything there but a regular file with one hard link. size is the
// whole file's.
func ReadToolOutput(stateDir, name string, limit int64) (data []byte, fi fs.FileInfo, err error) {
	if spillName(strings.TrimSuffix(name, ".txt")) != name {
		return nil, nil, fmt.Errorf("%q: %w: not the name of a kept output", name, fs.ErrNotExist)
	}
	root, err := os.OpenRoot(filepath.Join(stateDir, SpillDir))
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	// One component, not followed if a symlink (the tools never make
	// one there); O_NONBLOCK: a FIFO must not block the open.
	f, err := root.OpenFile(name, os.O_RDONLY|noFollowNonblock, 0)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		// A symlink: ELOOP, or os.Root's own refusal of one that leads out.
		err = fmt.Errorf("%w: %w", ErrNotAFile, err)
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if fi, err = checkOpened(f); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrNotAFile, err)
	}
	data, err = io.ReadAll(io.LimitReader(f, limit))
	return data, fi, err
}
