package tools

import (
	"bufio"
	"bytes"
	"context"
	"io/fs"
	"os"
	"path"
	"path/filepath"
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

// loadIgnore reads root/.gitignore; a missing or unreadable one means no
// rules.
func loadIgnore(root string) *ignoreRules {
	f, err := os.Open(filepath.Join(root, ".gitignore"))
	if err != nil {
		return &ignoreRules{}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return &ignoreRules{}
	}
	data := make([]byte, maxIgnoreFileBytes)
	n, _ := f.Read(data)
	return parseIgnore(data[:n])
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

// walkFiles walks the tree under base (a resolved directory inside ws),
// calling visit for each regular file and each symlink whose target is
// inside the workspace, in lexical order. It never descends into symlinked
// directories, skips what ig ignores (except base itself), and descends
// into a directory only when descend(relToBase) is true. visit gets the
// path relative to base ("/"-separated) and the path relative to the root.
// Unreadable directories are skipped. It stops with ctx's error, or with
// fs.SkipAll from visit.
func walkFiles(ctx context.Context, ws *Workspace, base string, ig *ignoreRules,
	descend func(rel string) bool, visit func(abs, rel string, d fs.DirEntry) error) error {
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if err != nil {
			if d != nil && d.IsDir() && p != base {
				return fs.SkipDir
			}
			return nil
		}
		if p == base {
			return nil
		}
		rel := filepath.ToSlash(p[len(base):])
		rel = strings.TrimPrefix(rel, "/")
		rootRel := filepath.ToSlash(ws.Rel(p))
		if d.IsDir() {
			if ig.ignored(rootRel, true) || !descend(rel) {
				return fs.SkipDir
			}
			return nil
		}
		if ig.ignored(rootRel, false) {
			return nil
		}
		switch t := d.Type(); {
		case t.IsRegular():
		case t&fs.ModeSymlink != 0:
			if _, err := ws.Resolve(p); err != nil {
				return nil // leads outside the workspace
			}
		default:
			return nil // devices, sockets, pipes
		}
		return visit(p, rel, d)
	})
	if err == fs.SkipAll {
		return nil
	}
	return err
}
