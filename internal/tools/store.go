package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/talkide/platform/internal/contract"
)

// ErrNameTaken is a Store that found every candidate name taken.
var ErrNameTaken = errors.New("every candidate name is taken")

// maxCandidates bounds the names Store tries.
const maxCandidates = 1000

// Store writes data as a new file in dir, a directory name directly under
// the workspace root that is created when missing, under the first free
// name candidate(0), candidate(1)…; it returns the path relative to the
// root. It never replaces or writes through anything: dir must be a real
// directory (a symlink there is refused, wherever it leads), and the file
// is written whole and fsynced under a temporary dot-name, then linked to
// the candidate, which fails on any existing entry, symlink included, and
// moves on to the next. So a reader sees no file or the whole file.
func (w *Workspace) Store(dir string, candidate func(int) string, data []byte) (string, error) {
	if !filepath.IsLocal(dir) || filepath.Base(dir) != dir {
		return "", fmt.Errorf("%q: %w", dir, ErrOutsideWorkspace)
	}
	if err := w.dir.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", w.confined(dir, err)
	}
	fi, err := w.dir.Lstat(dir)
	if err != nil {
		return "", w.confined(dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%q is not a directory (a %v): %w", dir, fi.Mode().Type(), ErrNotAFile)
	}
	d, err := openSubdir(w.dir, dir, fi)
	if err != nil {
		return "", w.confined(dir, err)
	}
	defer d.Close()
	tmp, err := writeTemp(d, data)
	if err != nil {
		return "", w.confined(dir, err)
	}
	defer d.Remove(tmp)
	for n := range maxCandidates {
		name := candidate(n)
		err := d.Link(tmp, name)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", w.confined(name, err)
		}
		syncDir(d)
		return dir + "/" + name, nil
	}
	return "", ErrNameTaken
}

// writeTemp writes data to a new file in d under a dot-name no stored name
// can have, fsynced, and returns its name.
func writeTemp(d *os.Root, data []byte) (string, error) {
	for {
		name := ".upload-" + contract.NewID("")
		f, err := d.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		_, err = f.Write(data)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			d.Remove(name)
			return "", err
		}
		return name, nil
	}
}

// syncDir makes the new name durable; a failure leaves the file written,
// only perhaps not its name after a crash, so it is not an error.
func syncDir(d *os.Root) {
	if f, err := d.Open("."); err == nil {
		_ = f.Sync()
		f.Close()
	}
}
