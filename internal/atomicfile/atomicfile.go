// Package atomicfile replaces files whole: the new content is written to a
// temporary file in the destination's directory, synced, given its mode and
// renamed over the destination, and the directory is synced. A reader sees
// the old content or the new, never a mix, and after a crash the file is one
// or the other. ReadFile reads such a file back whole, within a bound.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// maxTempTries bounds the search for a free temporary name; a clash is
// already one in 2^64.
const maxTempTries = 100

// syncFile is the temporary file's fsync; a test makes it fail.
var syncFile = (*os.File).Sync

// File is a file being written under a temporary name ".<name>.tmp-<random>"
// beside its destination. Commit puts it in place; Close without Commit
// removes it. A File is not safe for concurrent use.
type File struct {
	dir     *os.Root
	ownDir  bool // dir was opened by Create, and is closed with the File
	f       *os.File
	tmp     string
	name    string
	perm    fs.FileMode
	settled bool // committed or discarded
}

// Create starts replacing the file at path; it will have mode perm, exactly
// (the umask does not apply). The directory must exist.
func Create(path string, perm fs.FileMode) (*File, error) {
	dir, err := os.OpenRoot(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	f, err := CreateIn(dir, filepath.Base(path), perm)
	if err != nil {
		dir.Close()
		return nil, err
	}
	f.ownDir = true
	return f, nil
}

// CreateIn is Create for the file name directly in dir, every step through
// dir's descriptor: the temporary file and the rename land in the same
// directory whatever is renamed meanwhile, and nothing follows a symlink
// out of dir.
func CreateIn(dir *os.Root, name string, perm fs.FileMode) (*File, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, &fs.PathError{Op: "create", Path: name, Err: fs.ErrInvalid}
	}
	for range maxTempTries {
		tmp := "." + name + ".tmp-" + strconv.FormatUint(rand.Uint64(), 36)
		f, err := dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &File{dir: dir, f: f, tmp: tmp, name: name, perm: perm}, nil
	}
	return nil, fmt.Errorf("atomicfile: no free name for a temporary file beside %s", name)
}

// Write writes to the temporary file.
func (f *File) Write(p []byte) (int, error) { return f.f.Write(p) }

// Commit syncs the temporary file, gives it its mode and renames it over
// the destination, then syncs the directory. On an error before the rename
// the destination is as it was and the temporary file is gone; an error
// syncing the directory comes after the new content is in place.
func (f *File) Commit() error {
	if f.settled {
		return fmt.Errorf("atomicfile: %s: already committed or closed", f.name)
	}
	f.settled = true
	defer f.closeDir()
	err := f.f.Chmod(f.perm)
	if err == nil {
		err = syncFile(f.f)
	}
	if cerr := f.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = f.dir.Rename(f.tmp, f.name)
	}
	if err != nil {
		f.dir.Remove(f.tmp)
		return err
	}
	return syncRoot(f.dir)
}

// Close discards the temporary file unless Commit ran; then it does
// nothing. Deferring it right after Create cleans up every early return.
func (f *File) Close() error {
	if f.settled {
		return nil
	}
	f.settled = true
	defer f.closeDir()
	err := f.f.Close()
	if rerr := f.dir.Remove(f.tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

func (f *File) closeDir() {
	if f.ownDir {
		f.dir.Close()
	}
}

// WriteFile replaces the file at path with data, with mode perm exactly.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	f, err := Create(path, perm)
	if err != nil {
		return err
	}
	return write(f, data)
}

// WriteFileIn is WriteFile for the file name in dir, through dir's
// descriptor (see CreateIn).
func WriteFileIn(dir *os.Root, name string, data []byte, perm fs.FileMode) error {
	f, err := CreateIn(dir, name, perm)
	if err != nil {
		return err
	}
	return write(f, data)
}

func write(f *File, data []byte) error {
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Commit()
}

// SyncDir makes the renames and creations in dir durable. A filesystem
// that cannot sync a directory is not an error: there is nothing more to
// do there.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return ignoreUnsupported(d.Sync())
}

func syncRoot(dir *os.Root) error {
	d, err := dir.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	return ignoreUnsupported(d.Sync())
}

func ignoreUnsupported(err error) error {
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, errors.ErrUnsupported) {
		return nil
	}
	return err
}
