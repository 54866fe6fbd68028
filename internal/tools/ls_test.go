package tools

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLS(t *testing.T) {
	ws, outside := newSearchWorkspace(t)
	root := ws.Root()
	tests := map[string]struct {
		in      map[string]any
		want    []string // output lines
		isError string   // substring of the error, when one is expected
	}{
		"the whole tree": {in: map[string]any{"path": "."}, want: []string{
			"- ./",
			"  - .gitignore",
			"  - README.md",
			"  - a.txt",
			"  - ab.txt",
			"  - absin -> sub/",
			"  - b.txt",
			"  - bin.dat",
			"  - cmd/",
			"    - tool/",
			"      - main.go",
			"  - dangling_in -> sub/new.txt [broken]",
			"  - docs/",
			"    - guide.md",
			"  - inlink -> sub/",
			"  - internal/",
			"    - x/",
			"      - x.go",
			"      - x_test.go",
			"  - main.go",
			"  - sub/",
			"    - a.txt",
			"    - alink.txt -> sub/a.txt",
			"    - deep/",
			"      - up -> ./",
			"    - dist/",
			"      - keep.js",
			"    - viamissingin -> sub/a.txt",
			"  - web/",
			"    - app.js",
			"    - app.ts",
			"    - app.tsx",
		}},
		"a subdirectory":           {in: map[string]any{"path": "internal"}, want: []string{"- internal/", "  - x/", "    - x.go", "    - x_test.go"}},
		"absolute path":            {in: map[string]any{"path": filepath.Join(root, "cmd")}, want: []string{"- cmd/", "  - tool/", "    - main.go"}},
		"through a symlink inside": {in: map[string]any{"path": "inlink/deep"}, want: []string{"- sub/deep/", "  - up -> ./"}},
		"ignore by name at any depth": {in: map[string]any{"path": ".", "ignore": []string{"*.{go,txt,md,js,ts,tsx,dat}", "*link*", "absin", "dangling*", ".gitignore", "deep"}}, want: []string{
			"- ./", "  - cmd/", "    - tool/", "  - docs/", "  - internal/", "    - x/", "  - sub/", "    - dist/", "    - viamissingin -> sub/a.txt", "  - web/",
		}},
		"ignore by path":                {in: map[string]any{"path": "web", "ignore": []string{"app.t*"}}, want: []string{"- web/", "  - app.js"}},
		"ignored dir is not descended":  {in: map[string]any{"path": "internal", "ignore": []string{"x"}}, want: []string{"- internal/", "  (everything in it is skipped or ignored)"}},
		"ignore with a slash is a path": {in: map[string]any{"path": "cmd", "ignore": []string{"tool/main.go", "main.go"}}, want: []string{"- cmd/", "  - tool/"}},
		"an ignored directory itself":   {in: map[string]any{"path": "node_modules"}, want: []string{"- node_modules/", "  - dep/", "    - index.js"}},
		"dotdot even inside":            {in: map[string]any{"path": "sub/deep/.."}, isError: "outside the workspace"},
		"a file":                        {in: map[string]any{"path": "main.go"}, isError: "main.go is a file, not a directory; use Read"},
		"missing":                       {in: map[string]any{"path": "nope"}, isError: "Cannot list nope: directory does not exist"},
		"empty path":                    {in: map[string]any{"path": ""}, isError: `"path" must not be empty`},
		"missing path":                  {in: map[string]any{}, isError: `required field "path" is missing`},
		"bad ignore":                    {in: map[string]any{"path": ".", "ignore": []string{"ok", "[x"}}, isError: "ignore[1]: invalid glob pattern"},
		"ignore not a list":             {in: map[string]any{"path": ".", "ignore": "*.go"}, isError: `field "ignore" must be an array`},
		"dotdot":                        {in: map[string]any{"path": "../outside"}, isError: "outside the workspace"},
		"absolute outside":              {in: map[string]any{"path": outside}, isError: "outside the workspace"},
		"symlink outside":               {in: map[string]any{"path": "etc"}, isError: "outside the workspace"},
		"relative symlink outside":      {in: map[string]any{"path": "updown"}, isError: "outside the workspace"},
		"the root's parent via a link":  {in: map[string]any{"path": "sub/deep/upup"}, isError: "outside the workspace"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			checkListing(t, run(t, &LS{}, ws, tt.in), tt.isError != "", tt.isError, tt.want)
		})
	}
}

func TestLSNeverLeavesWorkspace(t *testing.T) {
	ws, _ := newSearchWorkspace(t)
	res := run(t, &LS{}, ws, map[string]any{"path": "."})
	for _, l := range lines(res.Output) {
		name := strings.TrimPrefix(strings.TrimSpace(l), "- ")
		switch {
		case strings.Contains(l, "secret"), strings.Contains(l, "leak.go"), strings.Contains(l, "/"+"outside"):
			t.Errorf("listed %q", l)
		case strings.HasPrefix(name, "etc"), strings.HasPrefix(name, "updown"), strings.HasPrefix(name, "chain"),
			strings.HasPrefix(name, "dangling_out"), strings.HasPrefix(name, "upup"), strings.HasPrefix(name, "loop"):
			t.Errorf("listed a symlink that leads outside: %q", l)
		case name == ".git/", name == "node_modules/", name == "build/", l == "  - dist/", name == "debug.log", name == "gen/":
			t.Errorf("listed a skipped entry: %q", l)
		}
	}
}

func TestLSCap(t *testing.T) {
	ws := newWorkspace(t)
	files := map[string]string{"z.txt": "", "a/deeper/x.txt": ""}
	for i := range MaxLSEntries + 5 {
		files[fmt.Sprintf("a/f%04d.txt", i)] = ""
	}
	writeFiles(t, ws.Root(), files)
	res := run(t, &LS{MaxOutputBytes: 1 << 20}, ws, map[string]any{"path": "."})
	got := lines(res.Output)
	// Breadth-first: the top level is complete, a/ is cut, a/deeper/ was
	// never read.
	want := []string{"- ./", "  - a/ [partly listed]", "    - deeper/ [not listed]", "    - f0000.txt"}
	if diff := cmp.Diff(want, got[:4]); diff != "" {
		t.Errorf("head (-want +got):\n%s", diff)
	}
	entries := 0
	for _, l := range got {
		if strings.HasPrefix(strings.TrimSpace(l), "- ") {
			entries++
		}
	}
	if entries != MaxLSEntries+1 { // and the root
		t.Errorf("%d entries listed, want %d", entries, MaxLSEntries)
	}
	if got[len(got)-3] != "  - z.txt" || got[len(got)-2] != "" {
		t.Errorf("the top level is not complete: %q", got[len(got)-3:])
	}
	if note := got[len(got)-1]; !strings.HasPrefix(note, "[showing the first 1000 entries, breadth-first;") {
		t.Errorf("note %q", note)
	}
}
