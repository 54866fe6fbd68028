package atomicfile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// leftovers fails t if dir holds a temporary file.
func leftovers(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

func TestWriteFileModes(t *testing.T) {
	// The umask must not change the mode asked for.
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, perm := range []fs.FileMode{0o644, 0o600, 0o640, 0o400} {
		content := []byte("mode " + perm.String())
		if err := WriteFile(path, content, perm); err != nil {
			t.Fatalf("WriteFile %v: %v", perm, err)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Mode() != perm {
			t.Errorf("mode after writing with %v: %v, %v", perm, fi.Mode(), err)
		}
		if b, _ := os.ReadFile(path); !bytes.Equal(b, content) {
			t.Errorf("content %q, want %q", b, content)
		}
	}
	leftovers(t, dir)
}

// A failure before the rename leaves the old file as it was, content and
// mode, and no temporary file.
func TestFailureKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := WriteFile(path, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	eio := errors.New("injected: input/output error")
	syncFile = func(*os.File) error { return eio }
	t.Cleanup(func() { syncFile = (*os.File).Sync })
	if err := WriteFile(path, []byte("new, longer than the old"), 0o600); !errors.Is(err, eio) {
		t.Fatalf("WriteFile with a failing fsync: %v", err)
	}
	fi, err := os.Stat(path)
	if b, _ := os.ReadFile(path); string(b) != "old" || err != nil || fi.Mode() != 0o640 {
		t.Errorf("after the failure: %q, %v, %v", b, fi.Mode(), err)
	}
	leftovers(t, dir)
}

// A rename that fails (the destination is a directory that is not empty)
// leaves it and removes the temporary file.
func TestRenameFailure(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "d")
	if err := os.MkdirAll(filepath.Join(path, "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("x"), 0o600); err == nil {
		t.Fatal("replaced a directory")
	}
	if fi, err := os.Stat(filepath.Join(path, "inside")); err != nil || !fi.IsDir() {
		t.Errorf("the directory changed: %v", err)
	}
	leftovers(t, dir)
}

func TestCloseWithoutCommitDiscards(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Create(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("half")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Commit(); err == nil {
		t.Error("Commit after Close succeeded")
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("content %q after a discarded write", b)
	}
	leftovers(t, dir)

	// Commit, then Close (as a deferred Close does): the new file stays.
	f, err = Create(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("new"))
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Errorf("content %q after Commit and Close", b)
	}
	leftovers(t, dir)
}

func TestMissingDirectory(t *testing.T) {
	if err := WriteFile(filepath.Join(t.TempDir(), "no", "f"), nil, 0o600); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("WriteFile in a missing directory: %v", err)
	}
}

// WriteFileIn stays in its directory: a name is one component, and a
// symlink at the destination is replaced, never written through.
func TestWriteFileIn(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, name := range []string{"", ".", "..", "a/b", "../x"} {
		if err := WriteFileIn(root, name, []byte("x"), 0o600); err == nil {
			t.Errorf("WriteFileIn(%q) succeeded", name)
		}
	}
	target := filepath.Join(outside, "target")
	os.WriteFile(target, []byte("outside"), 0o600)
	if err := os.Symlink(target, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileIn(root, "link", []byte("inside"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "outside" {
		t.Errorf("wrote through the symlink: %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "link")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the symlink was not replaced by a file: %v", err)
	}
	leftovers(t, dir)
}

// Readers during many replacements see one whole version or another.
func TestReadersSeeWholeVersions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	versions := [][]byte{bytes.Repeat([]byte("a"), 64<<10), bytes.Repeat([]byte("b"), 3<<10)}
	if err := WriteFile(path, versions[0], 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			b, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(b, versions[0]) && !bytes.Equal(b, versions[1]) {
				t.Errorf("read %d bytes, %v: not a whole version", len(b), err)
				return
			}
		}
	})
	for i := range 200 {
		if err := WriteFile(path, versions[i%2], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
}

func TestSyncDir(t *testing.T) {
	if err := SyncDir(t.TempDir()); err != nil {
		t.Error(err)
	}
	if err := SyncDir(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("SyncDir(missing) = %v", err)
	}
}

func TestReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if _, err := ReadFile(path, 4); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
	if err := WriteFile(path, []byte("four"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(path, 4); err != nil || string(b) != "four" {
		t.Errorf("ReadFile at the bound = %q, %v", b, err)
	}
	if b, err := ReadFile(path, 3); !errors.Is(err, ErrTooLarge) || b != nil {
		t.Errorf("ReadFile beyond the bound = %q, %v; want ErrTooLarge", b, err)
	}
}
