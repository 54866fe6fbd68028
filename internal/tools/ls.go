package tools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// LSInput is the input of LS.
type LSInput struct {
	Path   string   `json:"path"`
	Ignore []string `json:"ignore,omitempty"` // glob patterns of entries to leave out
}

// MaxLSEntries caps the entries LS lists.
const MaxLSEntries = 1000

const lsDescription = `Lists a directory of the workspace as a tree: files, and directories (marked with a trailing "/") with their contents.

- path is the directory to list, relative to the workspace root or absolute inside it ("." is the root).
- ignore is an optional list of glob patterns of entries to leave out: a pattern without "/" matches entry names at any depth ("*.log", "testdata"); one with "/" matches the path below path ("web/dist", "**/gen/*.go"). An ignored directory is not descended into.
- Lists at most 1000 entries, breadth-first, so the top levels come first; a directory whose contents were cut is marked.
- Skips .git, node_modules and what the root .gitignore ignores, like Glob and Grep. Symlinks are shown as "name -> target" and not followed; those leading outside the workspace are left out.
- Prefer Glob and Grep when you know what you are looking for.`

// LS lists a directory tree. The zero value uses the defaults of Options.
type LS struct {
	MaxOutputBytes int // 0 means DefaultMaxOutputBytes
}

func (*LS) Name() string        { return "LS" }
func (*LS) Description() string { return lsDescription }

func (*LS) InputSchema() map[string]any {
	return objectSchema(map[string]any{
		"path": property("string", "The directory to list, relative to the workspace root or absolute inside it"),
		"ignore": map[string]any{
			"type":        "array",
			"items":       map[string]any{"type": "string"},
			"description": "List of glob patterns to ignore",
		},
	}, "path")
}

// lsEntry is one listed file or directory.
type lsEntry struct {
	name     string
	abs      string // real path (for directories to descend into)
	rel      string // "/"-separated, relative to the listed directory
	dir      bool
	link     string      // a symlink's target relative to the root, or ""
	id       fs.FileInfo // a directory's Lstat, from its parent's descriptor when it was listed
	children []*lsEntry
	note     string // a mark after the name: [broken], [partly listed], [not listed], [unreadable], [changed while listed]
	skipped  int    // children skipped or ignored
}

func (l *LS) Run(ctx context.Context, call Call) (Result, error) {
	var in LSInput
	if res, done, err := begin(ctx, call, &in, "path"); done {
		return res, err
	}
	if in.Path == "" {
		return errorResult("invalid input: field \"path\" must not be empty; use \".\" for the workspace root"), nil
	}
	type ignorePattern struct {
		g        *globPattern
		nameOnly bool
	}
	var ignore []ignorePattern
	for i, p := range in.Ignore {
		g, err := compileGlob(p)
		if err != nil {
			return errorResult("invalid input: ignore[%d]: %v", i, err), nil
		}
		ignore = append(ignore, ignorePattern{g, !strings.Contains(p, "/")})
	}
	ws := call.Workspace
	base, err := ws.Resolve(in.Path)
	if err != nil {
		return errorResult("Cannot list %v", err), nil
	}
	fi, err := ws.stat(base)
	switch {
	case errors.Is(err, ErrOutsideWorkspace):
		return errorResult("Cannot list %v", err), nil
	case err != nil:
		return errorResult("Cannot list %s: directory does not exist", ws.Rel(base)), nil
	case !fi.IsDir():
		return errorResult("%s is a file, not a directory; use Read to read it", ws.Rel(base)), nil
	}

	gitignore := loadIgnore(ws)
	skip := func(e *lsEntry) bool {
		if gitignore.ignored(filepath.ToSlash(ws.Rel(e.abs)), e.dir && e.link == "") {
			return true
		}
		for _, p := range ignore {
			target := e.rel
			if p.nameOnly {
				target = e.name
			}
			if p.g.match(target) {
				return true
			}
		}
		return false
	}

	// Breadth-first, so that the cap cuts the deepest levels.
	root := &lsEntry{abs: base, dir: true}
	queue := []*lsEntry{root}
	count := 0
	capped := false
	for len(queue) > 0 && !capped {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		d := queue[0]
		queue = queue[1:]
		des, err := lsDir(ws, d)
		if errors.Is(err, errChanged) {
			d.note = "[changed while listed]"
			continue
		}
		if err != nil {
			d.note = "[unreadable]"
			continue
		}
		for _, de := range des {
			e := &lsEntry{name: de.Name(), abs: filepath.Join(d.abs, de.Name()), dir: de.IsDir()}
			e.rel = path.Join(d.rel, e.name)
			if de.IsDir() {
				// From d's descriptor, as it was listed (see readDir).
				if fi, err := de.Info(); err == nil && fi.IsDir() {
					e.id = fi
				}
			}
			if de.Type()&os.ModeSymlink != 0 {
				target, err := ws.Resolve(e.abs)
				if err != nil {
					continue // leads outside the workspace
				}
				e.link = filepath.ToSlash(ws.Rel(target))
				switch tfi, err := ws.stat(target); {
				case err != nil:
					e.note = "[broken]"
				case tfi.IsDir():
					e.dir = true
				}
			}
			if skip(e) {
				d.skipped++
				continue
			}
			if count == MaxLSEntries {
				d.note = "[partly listed]"
				capped = true
				break
			}
			count++
			d.children = append(d.children, e)
			switch {
			case !e.dir || e.link != "":
			case e.id == nil: // swapped for something else since listed
				e.note = "[changed while listed]"
			default:
				queue = append(queue, e)
			}
		}
	}
	for _, d := range queue {
		d.note = "[not listed]"
	}

	var b strings.Builder
	label := filepath.ToSlash(ws.Rel(base))
	fmt.Fprintf(&b, "- %s/", label)
	if root.note != "" {
		b.WriteString(" " + root.note)
	}
	b.WriteByte('\n')
	switch {
	case len(root.children) > 0 || root.note != "":
	case root.skipped > 0:
		b.WriteString("  (everything in it is skipped or ignored)\n")
	default:
		b.WriteString("  (empty directory)\n")
	}
	writeLSTree(&b, root, 1)
	if capped {
		fmt.Fprintf(&b, "\n[showing the first %d entries, breadth-first; directories marked [partly listed] or [not listed] hold more: list them with LS, or use Glob]\n", MaxLSEntries)
	}
	return Result{Output: CapOutput(call, b.String(), outputCap(l.MaxOutputBytes))}, nil
}

// lsDir lists d, sorted by name. d is opened through the root descriptor
// and must be the directory its parent listed (d.id), not one that a
// symlink swapped in since leads to.
func lsDir(ws *Workspace, d *lsEntry) ([]fs.DirEntry, error) {
	dir, err := ws.openDir(d.abs, d.id)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return readDir(dir)
}

// writeLSTree writes d's children, depth-first, indented two spaces per
// level.
func writeLSTree(b *strings.Builder, d *lsEntry, depth int) {
	indent := strings.Repeat("  ", depth)
	for _, e := range d.children {
		b.WriteString(indent)
		b.WriteString("- ")
		b.WriteString(e.name)
		if e.dir && e.link == "" {
			b.WriteByte('/')
		}
		if e.link != "" {
			b.WriteString(" -> ")
			b.WriteString(e.link)
			if e.dir {
				b.WriteByte('/')
			}
		}
		if e.note != "" {
			b.WriteByte(' ')
			b.WriteString(e.note)
		}
		b.WriteByte('\n')
		writeLSTree(b, e, depth+1)
	}
}
