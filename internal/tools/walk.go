package tools

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// alwaysSkipped are directory names Glob and Grep never descend into.
var alwaysSkipped = map[string]bool{".git": true, "node_modules": true}

// maxIgnoreFileBytes bounds the root .gitignore that is read.
const maxIgnoreFileBytes = 1 << 20

// ignoreRules is the subset of a root .gitignore that Glob and Grep honour:
//
//   - blank lines and lines starting with "#" are skipped;
//   - "!negations" are not supported and skipped (so more is ignored, not less);
//   - a trailing "/" restricts the line to directories;
//   - a line without "/" (after removing a trailing one) is a name pattern
//     ("build", "*.log") matched against the base name at any depth;
//   - a line with a leading or inner "/" ("/dist", "docs/gen") is matched
//     against the whole path from the workspace root, with "*", "?", "[...]"
//     and "**" as in Glob.
//
// Nested .gitignore files, .git/info/exclude and global excludes are not read.
type ignoreRules struct {
	rules []ignoreRule
}

type ignoreRule struct {
	name     string       // base-name pattern, when not anchored
	anchored *globPattern // path pattern from the root, when anchored
	dirOnly  bool
}

// loadIgnore reads the workspace's root .gitignore, through the workspace
// as Read would; a missing or unreadable one means no rules.
func loadIgnore(ws *Workspace) *ignoreRules {
	f, _, err := ws.openRegular(filepath.Join(ws.root, ".gitignore"))
	if err != nil {
		return &ignoreRules{}
	}
	defer f.Close()
	data, _ := io.ReadAll(io.LimitReader(f, maxIgnoreFileBytes))
	return parseIgnore(data)
}

func parseIgnore(data []byte) *ignoreRules {
	ig := &ignoreRules{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), " \t\r")
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "!") {
			continue
		}
		var r ignoreRule
		if strings.HasSuffix(line, "/") {
			r.dirOnly = true
			line = strings.TrimRight(line, "/")
		}
		if line == "" {
			continue
		}
		if strings.Contains(line, "/") {
			g, err := compileGlob(strings.TrimPrefix(line, "/"))
			if err != nil {
				continue
			}
			r.anchored = g
		} else {
			if _, err := path.Match(line, ""); err != nil {
				continue
			}
			r.name = line
		}
		ig.rules = append(ig.rules, r)
	}
	return ig
}

// ignored reports whether rel, a "/"-separated path from the workspace root,
// is skipped.
func (ig *ignoreRules) ignored(rel string, isDir bool) bool {
	base := path.Base(rel)
	if isDir && alwaysSkipped[base] {
		return true
	}
	for _, r := range ig.rules {
		if r.dirOnly && !isDir {
			continue
		}
		if r.anchored != nil {
			if r.anchored.match(rel) {
				return true
			}
			continue
		}
		if ok, _ := path.Match(r.name, base); ok {
			return true
		}
	}
	return false
}

// walkEntry is a file walkFiles found.
type walkEntry struct {
	dir     *os.Root    // the directory holding it, open for the visit only
	name    string      // its name in dir
	rel     string      // "/"-separated, relative to the walk's base
	rootRel string      // "/"-separated, relative to the workspace root
	typ     fs.FileMode // its type as the directory listed it
	info    fs.FileInfo // its Lstat, from dir's descriptor when it was listed
	target  string      // a symlink's real target, from Resolve
}

// walkFiles walks the tree under base (a resolved directory inside ws),
// calling visit for each regular file and each symlink whose target is
// inside the workspace, in lexical order. It never descends into symlinked
// directories, skips what ig ignores (except base itself), and descends
// into a directory only when descend(relToBase) is true. Unreadable
// directories are skipped. It stops with ctx's error, or with fs.SkipAll
// from visit.
//
// Each directory is opened from its parent's descriptor, and base from the
// workspace's, so no directory is reached by a name from outside the
// workspace; and a directory that a concurrent process swaps for a symlink
// after it was listed is not descended into (openSubdir), even when the
// link leads somewhere inside.
func walkFiles(ctx context.Context, ws *Workspace, base string, ig *ignoreRules,
	descend func(rel string) bool, visit func(e walkEntry) error) error {
	dir, err := ws.openDir(base, nil)
	if err != nil {
		return nil // as an unreadable directory
	}
	defer dir.Close()
	w := &walker{ctx: ctx, ws: ws, ig: ig, descend: descend, visit: visit}
	err = w.dir(dir, "", filepath.ToSlash(ws.Rel(base)))
	if err == fs.SkipAll {
		return nil
	}
	return err
}

// walker is the state of one walkFiles.
type walker struct {
	ctx     context.Context
	ws      *Workspace
	ig      *ignoreRules
	descend func(rel string) bool
	visit   func(e walkEntry) error
}

// dir walks the directory d, at rel from the base and rootRel from the root.
func (w *walker) dir(d *os.Root, rel, rootRel string) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	entries, err := readDir(d)
	if err != nil {
		return nil // unreadable: skipped
	}
	for _, de := range entries {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		e := walkEntry{dir: d, name: de.Name(), rel: path.Join(rel, de.Name()), rootRel: path.Join(rootRel, de.Name()), typ: de.Type()}
		if e.info, err = de.Info(); err != nil {
			continue // gone since the listing
		}
		if de.IsDir() {
			if w.ig.ignored(e.rootRel, true) || !w.descend(e.rel) {
				continue
			}
			sub, err := openSubdir(d, e.name, e.info)
			if err != nil {
				continue // unreadable, or swapped for a symlink
			}
			err = w.dir(sub, e.rel, e.rootRel)
			sub.Close()
			if err != nil {
				return err
			}
			continue
		}
		if w.ig.ignored(e.rootRel, false) {
			continue
		}
		switch {
		case e.typ.IsRegular():
		case e.typ&fs.ModeSymlink != 0:
			target, err := w.ws.Resolve(filepath.Join(w.ws.root, filepath.FromSlash(e.rootRel)))
			if err != nil {
				continue // leads outside the workspace
			}
			e.target = target
		default:
			continue // devices, sockets, pipes
		}
		if err := w.visit(e); err != nil {
			return err
		}
	}
	return nil
}

// readDir lists d, sorted by name. The entries' Info is their Lstat from
// d's descriptor, taken while listing (the os package does so for a
// directory opened through an os.Root), not by path.
func readDir(d *os.Root) ([]fs.DirEntry, error) {
	f, err := d.Open(".")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readDirFile(f)
}

// readDirFile lists the open directory f, sorted by name.
func readDirFile(f *os.File) ([]fs.DirEntry, error) {
	entries, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, nil
}
