package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"
)

// GrepInput is the input of Grep. The dashed names are ripgrep's flags, as
// in Claude Code.
type GrepInput struct {
	Pattern     string `json:"pattern"`
	Path        string `json:"path,omitempty"`        // file or directory; empty means the root
	Glob        string `json:"glob,omitempty"`        // file-name filter
	Type        string `json:"type,omitempty"`        // file type, as rg --type: "go", "py"…
	OutputMode  string `json:"output_mode,omitempty"` // "files_with_matches" (default), "content" or "count"
	IgnoreCase  bool   `json:"-i,omitempty"`
	LineNumbers *bool  `json:"-n,omitempty"` // content mode; nil means true
	After       *int   `json:"-A,omitempty"`
	Before      *int   `json:"-B,omitempty"`
	Context     int    `json:"-C,omitempty"`
	HeadLimit   int    `json:"head_limit,omitempty"`
	Multiline   bool   `json:"multiline,omitempty"`
}

// Output modes of Grep.
const (
	GrepFilesWithMatches = "files_with_matches"
	GrepContent          = "content"
	GrepCount            = "count"
)

// maxGrepFileBytes is the largest file Grep searches; larger ones are
// skipped (and named in a note).
const maxGrepFileBytes = 10 << 20

// grepTypes maps Grep's type filter to file-name globs, a subset of
// ripgrep's type list.
var grepTypes = map[string]string{
	"c":          "*.{c,h}",
	"cpp":        "*.{cpp,cc,cxx,c++,hpp,hh,hxx,h,inl}",
	"cs":         "*.cs",
	"css":        "*.{css,scss,sass,less}",
	"docker":     "{Dockerfile,*.dockerfile,Dockerfile.*}",
	"go":         "*.go",
	"html":       "*.{html,htm}",
	"java":       "*.java",
	"js":         "*.{js,jsx,mjs,cjs,vue}",
	"json":       "*.{json,jsonl}",
	"kotlin":     "*.{kt,kts}",
	"make":       "{Makefile,makefile,GNUmakefile,*.mk,*.mak}",
	"md":         "*.{md,markdown,mdx}",
	"php":        "*.php",
	"proto":      "*.proto",
	"py":         "*.{py,pyi}",
	"ruby":       "{*.rb,Gemfile,Rakefile,*.gemspec}",
	"rust":       "*.rs",
	"sh":         "*.{sh,bash,zsh}",
	"sql":        "*.sql",
	"swift":      "*.swift",
	"toml":       "*.toml",
	"ts":         "*.{ts,tsx,mts,cts}",
	"txt":        "*.txt",
	"xml":        "*.{xml,xsd,xsl}",
	"yaml":       "*.{yaml,yml}",
	"markdown":   "*.{md,markdown,mdx}",
	"python":     "*.{py,pyi}",
	"javascript": "*.{js,jsx,mjs,cjs}",
	"typescript": "*.{ts,tsx,mts,cts}",
}

const grepDescription = `Searches file contents in the workspace with a regular expression (Go RE2 syntax, like ripgrep's: "log.*Error", "func\\s+\\w+"; no lookaround or backreferences; escape literal braces and dots).

- output_mode: "files_with_matches" (default) lists matching files, most recently modified first; "content" shows matching lines as path:line:text (-n, default true, for line numbers; -A/-B/-C for context lines); "count" shows matches per file.
- Filter files with glob ("*.go", "**/*.{ts,tsx}"; a glob without "/" matches file names at any depth) or type ("go", "py", "js", "ts", "rust"…).
- -i for case-insensitive. multiline: true lets . match newlines and patterns span lines.
- head_limit keeps only the first N results (lines, files or counts).
- path is a file or directory to search (default: the workspace root). Paths in results are relative to the workspace root.
- Skips binary files, files over 10 MiB, .git, node_modules and directories ignored by the root .gitignore.
- Prefer Grep over grep or rg in Bash.`

// Grep searches file contents. The zero value uses the defaults of Options.
type Grep struct {
	MaxOutputBytes int // 0 means DefaultMaxOutputBytes
}

func (*Grep) Name() string        { return "Grep" }
func (*Grep) Description() string { return grepDescription }

func (*Grep) InputSchema() map[string]any {
	return objectSchema(map[string]any{
		"pattern": property("string", "The regular expression to search for in file contents (Go RE2 syntax)"),
		"path":    property("string", "File or directory to search in, relative to the workspace root or absolute inside it. Defaults to the workspace root"),
		"glob":    property("string", `Glob pattern to filter files (e.g. "*.js", "**/*.{ts,tsx}")`),
		"type":    property("string", "File type to search (e.g. go, py, js, ts, rust, java). More efficient than glob for standard file types"),
		"output_mode": map[string]any{
			"type":        "string",
			"enum":        []any{GrepContent, GrepFilesWithMatches, GrepCount},
			"description": `Output mode: "content" shows matching lines (supports -A/-B/-C context, -n line numbers, head_limit), "files_with_matches" shows file paths (supports head_limit), "count" shows match counts (supports head_limit). Defaults to "files_with_matches"`,
		},
		"-i":         property("boolean", "Case insensitive search"),
		"-n":         property("boolean", `Show line numbers in output. Requires output_mode: "content". Defaults to true`),
		"-A":         property("number", `Number of lines to show after each match. Requires output_mode: "content"`),
		"-B":         property("number", `Number of lines to show before each match. Requires output_mode: "content"`),
		"-C":         property("number", `Number of lines to show before and after each match. Requires output_mode: "content"`),
		"head_limit": property("number", "Limit output to the first N lines or entries. Defaults to no limit"),
		"multiline":  property("boolean", "Enable multiline mode where . matches newlines and patterns can span lines. Default: false"),
	}, "pattern")
}

func (g *Grep) Run(ctx context.Context, call Call) (Result, error) {
	var in GrepInput
	if res, done, err := begin(ctx, call, &in, "pattern"); done {
		return res, err
	}
	if in.Pattern == "" {
		return errorResult("invalid input: field \"pattern\" must not be empty"), nil
	}
	mode := in.OutputMode
	switch mode {
	case "":
		mode = GrepFilesWithMatches
	case GrepFilesWithMatches, GrepContent, GrepCount:
	default:
		return errorResult("invalid input: field \"output_mode\" must be %q, %q or %q, got %q", GrepFilesWithMatches, GrepContent, GrepCount, mode), nil
	}
	for name, v := range map[string]int{"-C": in.Context, "head_limit": in.HeadLimit} {
		if err := nonNegative(name, v); err != nil {
			return errorResult("%v", err), nil
		}
	}
	before, after := in.Context, in.Context
	if in.Before != nil {
		before = *in.Before
	}
	if in.After != nil {
		after = *in.After
	}
	if err := nonNegative("-B", before); err != nil {
		return errorResult("%v", err), nil
	}
	if err := nonNegative("-A", after); err != nil {
		return errorResult("%v", err), nil
	}
	numbers := in.LineNumbers == nil || *in.LineNumbers

	flags := ""
	if in.IgnoreCase {
		flags += "i"
	}
	if in.Multiline {
		flags += "sm"
	}
	expr := in.Pattern
	if flags != "" {
		expr = "(?" + flags + ")" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return errorResult("Invalid regular expression %q: %v", in.Pattern, err), nil
	}

	var filters []*globPattern
	var nameOnly []bool
	if in.Glob != "" {
		gp, err := compileGlob(in.Glob)
		if err != nil {
			return errorResult("Invalid glob: %v", err), nil
		}
		filters = append(filters, gp)
		nameOnly = append(nameOnly, !strings.Contains(in.Glob, "/"))
	}
	if in.Type != "" {
		tg, ok := grepTypes[in.Type]
		if !ok {
			names := make([]string, 0, len(grepTypes))
			for n := range grepTypes {
				names = append(names, n)
			}
			sort.Strings(names)
			return errorResult("Unknown file type %q; known types: %s. Or use glob instead.", in.Type, strings.Join(names, ", ")), nil
		}
		gp, _ := compileGlob(tg)
		filters = append(filters, gp)
		nameOnly = append(nameOnly, true)
	}
	keep := func(rel string) bool {
		for i, f := range filters {
			target := rel
			if nameOnly[i] {
				target = path.Base(rel)
			}
			if !f.match(target) {
				return false
			}
		}
		return true
	}

	ws := call.Workspace
	dir := in.Path
	if dir == "" {
		dir = "."
	}
	base, err := ws.Resolve(dir)
	if err != nil {
		return errorResult("Cannot search %v", err), nil
	}
	fi, err := ws.stat(base)
	switch {
	case errors.Is(err, ErrOutsideWorkspace):
		return errorResult("Cannot search %v", err), nil
	case err != nil:
		return errorResult("Cannot search %s: no such file or directory", ws.Rel(base)), nil
	}

	maxOut := outputCap(g.MaxOutputBytes)
	s := &grepSearch{
		re: re, multiline: in.Multiline, mode: mode, numbers: numbers,
		before: before, after: after, headLimit: in.HeadLimit,
		out:  newHeadTail(maxOut),
		full: newSpill(call, maxOut),
	}
	s.out.tee = s.full
	defer s.full.finish(false)
	if fi.Mode().IsRegular() {
		// One file named by the call: a refusal is the call's error.
		rel := ws.Rel(base)
		f, fi, err := ws.openRegular(base)
		switch {
		case errors.Is(err, ErrOutsideWorkspace):
			return errorResult("Cannot search %v", err), nil
		case err != nil:
			return errorResult("Cannot search %s: %v", rel, err), nil
		}
		s.file(f, filepath.ToSlash(rel), fi)
		f.Close()
	} else if fi.IsDir() {
		err = walkFiles(ctx, ws, base, loadIgnore(ws),
			func(string) bool { return true },
			func(e walkEntry) error {
				if !e.typ.IsRegular() || !keep(e.rel) {
					return nil // symlinks are not followed
				}
				f, err := e.dir.OpenFile(e.name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
				if err != nil {
					return nil
				}
				defer f.Close()
				fi, err := checkOpened(f)
				switch {
				case errors.Is(err, ErrHardLinked):
					s.hardLinked = append(s.hardLinked, e.rootRel)
					return nil
				case err != nil:
					return nil
				}
				if s.file(f, e.rootRel, fi) {
					return fs.SkipAll
				}
				return nil
			})
		if err != nil {
			return Result{}, err
		}
	} else {
		return errorResult("Cannot search %s: not a regular file or directory", ws.Rel(base)), nil
	}
	return Result{Output: s.result(call)}, nil
}

// grepSearch is the state of one Grep call.
type grepSearch struct {
	re                *regexp.Regexp
	multiline         bool
	mode              string
	numbers           bool
	before, after     int
	headLimit         int
	out               *headTail
	full              *spill // what out receives, to keep it whole when out cuts it
	entries           int    // lines (content) or files (count) written to out
	limited           bool   // head_limit cut the output
	files             []grepFile
	totalMatches      int
	tooBig            []string
	hardLinked        []string // files not searched for their hard links
	wroteContentGroup bool
}

type grepFile struct {
	rel   string
	mtime time.Time
}

// file searches f, the open file rel, and reports whether the search is
// complete (the head_limit was reached in a mode that streams its results).
func (s *grepSearch) file(f *os.File, rel string, fi fs.FileInfo) (done bool) {
	if fi.Size() > maxGrepFileBytes {
		s.tooBig = append(s.tooBig, rel)
		return false
	}
	data, err := readLimited(f, fi.Size(), maxGrepFileBytes)
	if errors.Is(err, errTooLarge) { // it grew since the fstat
		s.tooBig = append(s.tooBig, rel)
		return false
	}
	if err != nil || bytes.IndexByte(data[:min(len(data), binarySniffBytes)], 0) >= 0 {
		return false
	}
	starts := lineStarts(data)
	if len(starts) == 0 {
		return false
	}
	line := func(i int) []byte { // line i (0-based) without its ending
		end := len(data)
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		return bytes.TrimSuffix(bytes.TrimSuffix(data[starts[i]:end], []byte("\n")), []byte("\r"))
	}
	matched := make([]bool, len(starts))
	count := 0
	if s.multiline {
		for _, m := range s.re.FindAllIndex(data, -1) {
			first := lineOf(starts, m[0])
			last := lineOf(starts, max(m[0], m[1]-1))
			for i := first; i <= last; i++ {
				matched[i] = true
			}
			count++
		}
	} else {
		for i := range starts {
			if s.re.Match(line(i)) {
				matched[i] = true
				count++
			}
		}
	}
	if count == 0 {
		return false
	}
	s.totalMatches += count
	switch s.mode {
	case GrepFilesWithMatches:
		s.files = append(s.files, grepFile{rel, fi.ModTime()})
	case GrepCount:
		if s.headLimit > 0 && s.entries >= s.headLimit {
			s.limited = true
			return true
		}
		fmt.Fprintf(s.out, "%s:%d\n", rel, count)
		s.entries++
	case GrepContent:
		return s.content(rel, matched, line)
	}
	return false
}

// content writes the matched lines of one file with their context.
func (s *grepSearch) content(rel string, matched []bool, line func(int) []byte) (done bool) {
	show := make([]bool, len(matched))
	for i, m := range matched {
		if !m {
			continue
		}
		for j := max(0, i-s.before); j <= min(len(matched)-1, i+s.after); j++ {
			show[j] = true
		}
	}
	withContext := s.before > 0 || s.after > 0
	prev := -2
	for i, sh := range show {
		if !sh {
			continue
		}
		if s.headLimit > 0 && s.entries >= s.headLimit {
			s.limited = true
			return true
		}
		if withContext && s.wroteContentGroup && i != prev+1 {
			s.out.Write([]byte("--\n"))
		}
		sep := "-"
		if matched[i] {
			sep = ":"
		}
		text := string(line(i))
		if len(text) > MaxLineChars {
			text = headUTF8(text[:MaxLineChars]) + " [… line truncated]"
		}
		if s.numbers {
			fmt.Fprintf(s.out, "%s%s%d%s%s\n", rel, sep, i+1, sep, text)
		} else {
			fmt.Fprintf(s.out, "%s%s%s\n", rel, sep, text)
		}
		s.entries++
		s.wroteContentGroup = true
		prev = i
	}
	return false
}

func (s *grepSearch) result(call Call) string {
	var b strings.Builder
	streamed := 0 // bytes at the start of b that come from s.out
	switch s.mode {
	case GrepFilesWithMatches:
		sort.SliceStable(s.files, func(i, j int) bool {
			if !s.files[i].mtime.Equal(s.files[j].mtime) {
				return s.files[i].mtime.After(s.files[j].mtime)
			}
			return s.files[i].rel < s.files[j].rel
		})
		files := s.files
		if s.headLimit > 0 && len(files) > s.headLimit {
			files = files[:s.headLimit]
			s.limited = true
		}
		if len(files) > 0 {
			fmt.Fprintf(&b, "Found %s\n", plural(len(s.files), "file"))
		}
		for _, f := range files {
			b.WriteString(f.rel)
			b.WriteByte('\n')
		}
	default:
		b.WriteString(s.out.String())
		streamed = b.Len()
		if s.mode == GrepCount && s.totalMatches > 0 && !s.limited {
			fmt.Fprintf(&b, "\nFound %s in total\n", plural(s.totalMatches, "match"))
		}
	}
	if s.totalMatches == 0 {
		b.WriteString("No matches found\n")
	}
	if s.limited {
		fmt.Fprintf(&b, "[head_limit %d reached; there are more results]\n", s.headLimit)
	}
	if len(s.tooBig) > 0 {
		fmt.Fprintf(&b, "[skipped %s larger than %d bytes: %s]\n", plural(len(s.tooBig), "file"), maxGrepFileBytes, strings.Join(s.tooBig, ", "))
	}
	if len(s.hardLinked) > 0 {
		fmt.Fprintf(&b, "[skipped %s with more than one hard link, which may be another name for a file outside the workspace: %s]\n",
			plural(len(s.hardLinked), "file"), listSome(s.hardLinked, maxListedSkips))
	}
	text, max := b.String(), s.out.max+200
	if s.out.cut() {
		// The full output is in s.full up to the streamed part; the notes
		// after it complete it.
		s.full.WriteString(text[streamed:])
		return appendNote(truncate(text, max), s.full.finish(true))
	}
	s.full.finish(false)
	return CapOutput(call, text, max)
}

// maxListedSkips bounds the files a note about skipped files names.
const maxListedSkips = 20

// listSome joins the first max names, and says how many more there are.
func listSome(names []string, max int) string {
	if len(names) <= max {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:max], ", "), len(names)-max)
}

// lineStarts returns the offset of each line's first byte. A final newline
// does not start another line; an empty file has no lines.
func lineStarts(data []byte) []int {
	var starts []int
	for i := 0; i < len(data); {
		starts = append(starts, i)
		j := bytes.IndexByte(data[i:], '\n')
		if j < 0 {
			break
		}
		i += j + 1
	}
	return starts
}

// lineOf returns the index of the line containing offset off.
func lineOf(starts []int, off int) int {
	return sort.Search(len(starts), func(i int) bool { return starts[i] > off }) - 1
}
