package tools

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/talkide/platform/internal/atomicfile"
)

// ErrHardLinked is wrapped by the error for a regular file with more than
// one hard link, which the file tools do not read: a hard link is another
// name for the same file, and it may be the name inside the workspace of a
// file elsewhere that the sandbox around Bash hides by its path.
var ErrHardLinked = errors.New("the file has more than one hard link")

// ErrIsDir is wrapped by the error for a directory where a file is read.
var ErrIsDir = errors.New("it is a directory")

// Errors of the file operations, for the tools' messages.
var (
	errNotRegular = errors.New("not a regular file")
	errTooLarge   = errors.New("the file is too large")
	// errChanged is a directory replaced, by a symlink or another
	// directory, between being listed and being opened.
	errChanged = errors.New("it changed while it was being listed")
)

// hardLinkError is a file refused for its hard links.
type hardLinkError struct{ links uint64 }

func (e *hardLinkError) Error() string {
	return fmt.Sprintf("it has %d hard links, and a hard-linked file may be another name for a file outside the workspace, so the file tools do not read it (Bash can, where its sandbox allows)", e.links)
}

func (e *hardLinkError) Is(target error) bool { return target == ErrHardLinked }

// notRegularError is a file that is neither a regular file nor a directory.
type notRegularError struct{ typ fs.FileMode }

func (e *notRegularError) Error() string {
	return fmt.Sprintf("not a regular file (%v)", e.typ)
}

func (e *notRegularError) Is(target error) bool { return target == errNotRegular }

// name returns real, a path from Resolve, as a name relative to the root
// descriptor ("." for the root itself).
func (w *Workspace) name(real string) (string, error) {
	rel, err := filepath.Rel(w.root, real)
	if err != nil || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%q: %w %s", real, ErrOutsideWorkspace, w.root)
	}
	return rel, nil
}

// confined returns err, from an operation through the root descriptor on
// name, with a path that led out of the root reported as ErrOutsideWorkspace
// and other errors stripped of the operation and path the os package puts
// in front of them (the tools name the file themselves).
func (w *Workspace) confined(name string, err error) error {
	if err == nil {
		return nil
	}
	if w.escapes != nil && errors.Is(err, w.escapes) {
		return fmt.Errorf("%q: %w: a symlink on the way leads out of it", filepath.ToSlash(name), ErrOutsideWorkspace)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// stat returns the FileInfo of real, a path from Resolve, following
// symlinks inside the workspace, through the root descriptor.
func (w *Workspace) stat(real string) (fs.FileInfo, error) {
	name, err := w.name(real)
	if err != nil {
		return nil, err
	}
	fi, err := w.dir.Stat(name)
	return fi, w.confined(name, err)
}

// openDir opens the directory real, a path from Resolve, through the root
// descriptor. When want is not nil, what is opened must be that directory
// (see sameDir), or the error wraps errChanged.
func (w *Workspace) openDir(real string, want fs.FileInfo) (*os.Root, error) {
	name, err := w.name(real)
	if err != nil {
		return nil, err
	}
	d, err := w.dir.OpenRoot(name)
	if err != nil {
		return nil, w.confined(name, err)
	}
	if want != nil {
		if err := sameDir(d, want); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// openSubdir opens the directory name in d, whose listing showed it as a
// directory with the Lstat listed. os.Root follows a symlink that stays
// beneath d, so one swapped in for the directory after the listing would
// be followed, to d itself or a sibling: what is opened must be the
// directory listed, or the error wraps errChanged.
func openSubdir(d *os.Root, name string, listed fs.FileInfo) (*os.Root, error) {
	if !listed.IsDir() {
		return nil, errChanged
	}
	sub, err := d.OpenRoot(name)
	if err != nil {
		return nil, err
	}
	if err := sameDir(sub, listed); err != nil {
		sub.Close()
		return nil, err
	}
	return sub, nil
}

// sameDir checks that dir, just opened, is the directory want describes
// (same device and inode), not another one a symlink led to.
func sameDir(dir *os.Root, want fs.FileInfo) error {
	got, err := dir.Stat(".")
	if err != nil {
		return err
	}
	if !os.SameFile(got, want) {
		return errChanged
	}
	return nil
}

// Open opens a file of the workspace for reading as Read does: name is
// resolved as by Resolve and opened through the root descriptor, and only a
// regular file with one hard link is opened (errors wrap fs.ErrNotExist,
// ErrOutsideWorkspace, ErrHardLinked, or say what else the file is). A FIFO
// does not block it.
func (w *Workspace) Open(name string) (*os.File, error) {
	real, err := w.Resolve(name)
	if err != nil {
		return nil, err
	}
	f, _, err := w.openRegular(real)
	if err != nil && !errors.Is(err, ErrOutsideWorkspace) { // which names the path already
		err = fmt.Errorf("%s: %w", filepath.ToSlash(w.Rel(real)), err)
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// openRegular opens real, a path from Resolve, for reading through the root
// descriptor, and returns it with its FileInfo. It refuses, before opening
// it, what is not a regular file (a device is not opened at all), and,
// after, a file with more than one hard link; errors wrap fs.ErrNotExist,
// ErrOutsideWorkspace, ErrHardLinked, ErrIsDir or errNotRegular.
func (w *Workspace) openRegular(real string) (*os.File, fs.FileInfo, error) {
	name, err := w.name(real)
	if err != nil {
		return nil, nil, err
	}
	fi, err := w.dir.Stat(name)
	if err != nil {
		return nil, nil, w.confined(name, err)
	}
	if err := regular(fi); err != nil {
		return nil, nil, err
	}
	// O_NONBLOCK: a FIFO swapped in after the Stat must not block the open.
	f, err := w.dir.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, w.confined(name, err)
	}
	fi, err = checkOpened(f)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// checkOpened checks that f, just opened, is a regular file with one hard
// link: what was opened, whatever the path now names, is what is read.
func checkOpened(f *os.File) (fs.FileInfo, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := regular(fi); err != nil {
		return nil, err
	}
	if n := links(fi); n > 1 {
		return nil, &hardLinkError{n}
	}
	return fi, nil
}

// regular returns nil for a regular file, ErrIsDir for a directory and a
// notRegularError for anything else.
func regular(fi fs.FileInfo) error {
	switch {
	case fi.Mode().IsRegular():
		return nil
	case fi.IsDir():
		return ErrIsDir
	default:
		return &notRegularError{fi.Mode().Type()}
	}
}

// links returns fi's number of hard links, or 1 where the system does not
// say.
func links(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

// readLimited reads r to its end, refusing more than limit bytes with
// errTooLarge. size, the file's size when it was opened, sizes the buffer.
func readLimited(r io.Reader, size, limit int64) ([]byte, error) {
	buf := make([]byte, 0, min(max(size, 0), limit)+1)
	for {
		if int64(len(buf)) > limit {
			return nil, errTooLarge
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			if int64(len(buf)) > limit {
				return nil, errTooLarge
			}
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// writeFile replaces the file at real, a path from Resolve, with data: it
// creates missing parent directories (0o755), writes a temporary file in the
// same directory, fsyncs it and renames it over the target, all through the
// root descriptor (atomicfile.WriteFileIn). So a reader sees the old content or the new, and a hard
// link at the target is replaced, never written through: the file it shares
// with another name, maybe outside the workspace, is left as it was. An
// existing file keeps its permission bits; a new one gets perm. existed
// reports whether there was a file to replace. Errors wrap
// ErrOutsideWorkspace, ErrIsDir or errNotRegular, or are the system's.
func (w *Workspace) writeFile(real string, data []byte, perm fs.FileMode) (existed bool, err error) {
	name, err := w.name(real)
	if err != nil {
		return false, err
	}
	if name == "." {
		return false, ErrIsDir
	}
	parent, base := filepath.Split(name)
	dir := w.dir
	if parent != "" {
		if err := w.dir.MkdirAll(parent, 0o755); err != nil {
			if errors.Is(err, fs.ErrExist) { // a file where a directory should be
				err = syscall.ENOTDIR
			}
			return false, w.confined(name, err)
		}
		// The temporary file and the rename use one descriptor of the
		// directory, so both happen in the same one, whatever is renamed
		// meanwhile.
		if dir, err = w.dir.OpenRoot(parent); err != nil {
			return false, w.confined(name, err)
		}
		defer dir.Close()
	}
	switch fi, err := dir.Lstat(base); {
	case err == nil:
		if err := regular(fi); err != nil {
			return false, err
		}
		existed = true
		perm = fi.Mode().Perm()
	case !errors.Is(err, fs.ErrNotExist):
		return false, w.confined(name, err)
	}
	return existed, w.confined(name, atomicfile.WriteFileIn(dir, base, data, perm))
}
