package tools

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// GlobInput is the input of Glob.
type GlobInput struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path,omitempty"` // directory to search in; empty means the root
}

// MaxGlobResults caps the files Glob lists.
const MaxGlobResults = 1000

const globDescription = `Finds files by name pattern in the workspace.

- Supports ** (any number of directories), *, ?, [abc] and {a,b}: "**/*.go", "src/**/*.{ts,tsx}", "cmd/*/main.go". A pattern without "/" matches only in the search directory itself; use "**/" to search recursively.
- path is the directory to search in (default: the workspace root).
- Returns file paths relative to the workspace root, most recently modified first, at most 1000.
- Skips .git, node_modules and directories ignored by the root .gitignore, and does not follow symlinked directories.
- Use Grep to search file contents.`

// Glob finds files by pattern. The zero value uses the defaults of Options.
type Glob struct {
	MaxOutputBytes int // 0 means DefaultMaxOutputBytes
}

func (*Glob) Name() string        { return "Glob" }
func (*Glob) Description() string { return globDescription }

func (*Glob) InputSchema() map[string]any {
	return objectSchema(map[string]any{
		"pattern": property("string", "The glob pattern to match files against"),
		"path":    property("string", "The directory to search in, relative to the workspace root or absolute inside it. Omit it to search the whole workspace"),
	}, "pattern")
}

// split splits the pattern into the directory to walk — path joined with
// the pattern's literal leading segments, which narrow the walk, or those
// segments alone when the pattern is absolute — and the glob proper.
func (in GlobInput) split() (dir, rest string) {
	segs := strings.Split(filepath.ToSlash(in.Pattern), "/")
	lit := 0
	for lit < len(segs)-1 && !hasMeta(segs[lit]) {
		lit++
	}
	dir = in.Path
	if dir == "" {
		dir = "."
	}
	prefix := strings.Join(segs[:lit], "/")
	switch {
	case strings.HasPrefix(in.Pattern, "/"):
		dir = prefix // absolute: path is ignored
		if dir == "" {
			dir = "/"
		}
	case prefix != "":
		dir = filepath.Join(dir, prefix)
	}
	return dir, strings.Join(segs[lit:], "/")
}

func (g *Glob) Run(ctx context.Context, call Call) (Result, error) {
	var in GlobInput
	if res, done, err := begin(ctx, call, &in, "pattern"); done {
		return res, err
	}
	if in.Pattern == "" {
		return errorResult("invalid input: field \"pattern\" must not be empty"), nil
	}
	ws := call.Workspace
	dir, rest := in.split()
	pat, err := compileGlob(rest)
	if err != nil {
		return errorResult("%v", err), nil
	}
	base, err := ws.Resolve(dir)
	if err != nil {
		return errorResult("Cannot search %v", err), nil
	}
	if err := searchDir(ws, base); err != nil {
		return errorResult("Cannot search %v", err), nil
	}

	type match struct {
		rel   string
		mtime time.Time
	}
	var matches []match
	err = walkFiles(ctx, ws, base, loadIgnore(ws),
		pat.mayMatchUnder,
		func(e walkEntry) error {
			if !pat.match(e.rel) {
				return nil
			}
			fi := e.info
			if e.target != "" { // a symlink: the target's time
				var err error
				if fi, err = ws.stat(e.target); err != nil {
					return nil
				}
			}
			if fi.IsDir() {
				return nil
			}
			matches = append(matches, match{e.rootRel, fi.ModTime()})
			return nil
		})
	if err != nil {
		return Result{}, err
	}
	if len(matches) == 0 {
		return Result{Output: "No files found"}, nil
	}
	sort.SliceStable(matches, func(i, j int) bool {
		if !matches[i].mtime.Equal(matches[j].mtime) {
			return matches[i].mtime.After(matches[j].mtime)
		}
		return matches[i].rel < matches[j].rel
	})
	var b strings.Builder
	for i, m := range matches {
		if i == MaxGlobResults {
			fmt.Fprintf(&b, "[showing %d of %d files; use a more specific pattern or path]\n", MaxGlobResults, len(matches))
			break
		}
		b.WriteString(m.rel)
		b.WriteByte('\n')
	}
	maxOut := outputCap(g.MaxOutputBytes)
	return Result{Output: CapOutput(call, b.String(), maxOut)}, nil
}

// searchDir checks that base, from Resolve, is a directory to search, with
// an error that names it for the model.
func searchDir(ws *Workspace, base string) error {
	rel := ws.Rel(base)
	fi, err := ws.stat(base)
	switch {
	case errors.Is(err, ErrOutsideWorkspace):
		return err
	case err != nil:
		return fmt.Errorf("%s: directory does not exist", rel)
	case !fi.IsDir():
		return fmt.Errorf("%s: not a directory", rel)
	}
	return nil
}
