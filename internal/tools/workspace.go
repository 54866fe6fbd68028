package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrOutsideWorkspace is wrapped by every error Resolve returns for a path
// that is, or leads, outside the workspace.
var ErrOutsideWorkspace = errors.New("path is outside the workspace")

// maxSymlinks bounds symlink resolution, as the kernel does (ELOOP).
const maxSymlinks = 40

// Workspace confines file access to one directory. The file tools (Read,
// Write, Edit, Glob, Grep, LS) resolve every model-supplied path through it.
// Bash is not confined by it: Bash's commands run in the conversation's
// sandbox (package sandbox), which is what confines them.
//
// Confinement holds in two places. Resolve checks a path in user space and
// returns its real location, which names files in results and is what the
// tool policy matches. Every file operation then goes through an os.Root
// opened on the workspace directory once, in NewWorkspace: the path is
// walked from that descriptor one component at a time, each step an openat
// relative to the directory before it, and a symlink is followed only while
// it stays beneath the root. A background process that swaps a directory
// for a symlink between Resolve and the operation (Bash can start one)
// makes the operation fail; it cannot make it land outside. The walkers
// open each directory from a descriptor too, and check that it is the
// directory they listed, so one swapped for a symlink mid-walk is not
// descended into, wherever the symlink leads.
//
// Writes replace the file (a temporary file and a rename) and reads refuse
// a file with more than one hard link: a hard link is another name for a
// file that may lie outside, and the sandbox around Bash hides files by
// their names.
//
// A Workspace is safe for concurrent use. Close releases its descriptor;
// one that is never closed releases it when it is garbage collected.
type Workspace struct {
	root  string   // absolute, symlinks resolved
	given string   // absolute, as given to NewWorkspace (may differ from root)
	dir   *os.Root // root, opened once: every file operation goes through it
	// escapes is the error os.Root returns for a path that leads out of
	// it. The os package does not export it; see escapeError.
	escapes error
}

// NewWorkspace returns the workspace rooted at root, creating the
// directory (0o755) if it is missing. Symlinks in root itself are resolved
// once, here.
func NewWorkspace(root string) (*Workspace, error) {
	if root == "" {
		return nil, errors.New("tools: empty workspace root")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("tools: workspace root: %w", err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("tools: workspace root: %w", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("tools: workspace root: %w", err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("tools: workspace root: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("tools: workspace root %s is not a directory", real)
	}
	dir, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("tools: workspace root: %w", err)
	}
	return &Workspace{root: real, given: abs, dir: dir, escapes: escapeError(dir)}, nil
}

// escapeError returns the error dir's methods wrap for a path that leads
// out of it: os.Root's own, which the os package does not export. A ".."
// from the root produces it without touching the file system.
// TestRootEscapeError checks that it still tells escapes apart.
func escapeError(dir *os.Root) error {
	_, err := dir.Lstat("..")
	return errors.Unwrap(err)
}

// Close releases the workspace's directory descriptor. The workspace's file
// operations fail after it.
func (w *Workspace) Close() error { return w.dir.Close() }

// Root returns the workspace directory, absolute and free of symlinks.
func (w *Workspace) Root() string { return w.root }

// Rel returns abs relative to the root, for display: "." for the root
// itself, abs unchanged when it is not inside the root.
func (w *Workspace) Rel(abs string) string {
	rel, err := filepath.Rel(w.root, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return abs
	}
	return rel
}

// Resolve maps a model-supplied path — relative to the root, or absolute
// but inside it — to a real path inside the workspace: every component that
// exists is resolved through its symlinks, and those that do not exist yet
// (a file Write will create) are kept as given. It refuses, with an error
// wrapping ErrOutsideWorkspace, any path with a ".." component, an absolute
// path outside the root, and a path that leads through a symlink to outside
// the root. The refusal names the path as given, never where it leads:
// the walk is the worker's, and a link to /proc/self/fd/9 or
// /proc/self/exe would otherwise tell the model the worker's open files
// and binary, one error at a time.
//
// The check is made in user space, by path, and names the file: opening
// what it returns is confined by the root descriptor, not by this check
// (see Workspace).
func (w *Workspace) Resolve(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty path")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	}
	for _, el := range strings.Split(filepath.ToSlash(p), "/") {
		if el == ".." {
			return "", fmt.Errorf("%q: %w: \"..\" is not allowed; use a path inside %s", p, ErrOutsideWorkspace, w.root)
		}
	}
	var rel string
	if filepath.IsAbs(p) {
		c := filepath.Clean(p)
		switch {
		case within(w.root, c):
			rel, _ = filepath.Rel(w.root, c)
		case within(w.given, c):
			rel, _ = filepath.Rel(w.given, c)
		default:
			return "", fmt.Errorf("%q: %w %s", p, ErrOutsideWorkspace, w.root)
		}
	} else {
		rel = filepath.Clean(p)
	}
	real, err := w.walk(rel)
	if err == nil && !within(w.root, real) {
		err = errLeadsOut
	}
	if err != nil {
		return "", fmt.Errorf("%q: %w", p, err)
	}
	return real, nil
}

// errLeadsOut is a path that a symlink leads out of the workspace.
var errLeadsOut = fmt.Errorf("%w: a symlink on the way leads out of it", ErrOutsideWorkspace)

// onTheWay reports whether p is inside the root or one of the directories
// on the way to it (as given or real): the only places a walk may pass
// through. Anywhere else, it has left the workspace and looks no further,
// so that nothing outside is even examined.
func (w *Workspace) onTheWay(p string) bool {
	return within(w.root, p) || within(p, w.root) || within(p, w.given)
}

// walk resolves rel, component by component from the root, following every
// symlink that exists (relative targets from the link's directory, absolute
// ones from /) and keeping components that do not exist as they are. The
// result has no symlink in any existing component and no ".." at all. A
// step off the way to the root (onTheWay) ends the walk with errLeadsOut.
func (w *Workspace) walk(rel string) (string, error) {
	cur := w.root
	todo := splitPath(rel)
	links := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			// Only from symlink targets: cur is real, so its lexical
			// parent is its physical parent.
			cur = filepath.Dir(cur)
			if !w.onTheWay(cur) {
				return "", errLeadsOut
			}
			continue
		}
		next := filepath.Join(cur, name)
		if !w.onTheWay(next) {
			return "", errLeadsOut
		}
		fi, err := os.Lstat(next)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				cur = next // does not exist (yet): nothing to resolve
				continue
			}
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		links++
		if links > maxSymlinks {
			return "", syscall.ELOOP // "too many levels of symbolic links", as the kernel says
		}
		target, err := os.Readlink(next)
		if errors.Is(err, syscall.EINVAL) {
			// No longer a symlink (a concurrent rename): look again,
			// within the bound on links.
			todo = append([]string{name}, todo...)
			continue
		}
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		todo = append(splitPath(target), todo...)
	}
	return cur, nil
}

func splitPath(p string) []string {
	return strings.Split(filepath.ToSlash(p), "/")
}

// within reports whether p is root or inside it; both are clean and absolute.
func within(root, p string) bool {
	if p == root {
		return true
	}
	if root == string(filepath.Separator) {
		return filepath.IsAbs(p)
	}
	return strings.HasPrefix(p, root+string(filepath.Separator))
}
