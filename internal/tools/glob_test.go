package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// searchTree is a workspace for Glob and Grep. Files are listed oldest
// first; each is one minute newer than the one before, so the newest-first
// order is the reverse of this list.
var searchTree = []struct{ name, content string }{
	{"main.go", "package main\n\nfunc main() {\n\tprintln(\"Hello\")\n}\n"},
	{"README.md", "# Project\nhello world\n"},
	{"cmd/tool/main.go", "package main\n\n// hello from tool\nfunc main() {}\n"},
	{"internal/x/x.go", "package x\n\nfunc X() string {\n\treturn \"hello\"\n}\n"},
	{"internal/x/x_test.go", "package x\n"},
	{"web/app.ts", "const hello = 1;\n"},
	{"web/app.tsx", "export const App = () => <div>hello</div>;\n"},
	{"web/app.js", "var hello;\n"},
	{"a.txt", "alpha\n"},
	{"b.txt", "bravo\n"},
	{"ab.txt", "alpha bravo\n"},
	{"bin.dat", "hello\x00world\n"},
	{"node_modules/dep/index.js", "hello\n"},
	{".git/config", "hello\n"},
	{"build/out.go", "package hello\n"},
	{"dist/bundle.js", "hello\n"},
	{"sub/dist/keep.js", "hello\n"},
	{"debug.log", "hello\n"},
	{"docs/gen/api.md", "hello\n"},
	{"docs/guide.md", "hello\n"},
	{".gitignore", "# generated\nbuild/\n/dist\n*.log\ndocs/gen\n"},
}

func newSearchWorkspace(t *testing.T) (*Workspace, string) {
	t.Helper()
	ws, outside := confinementTree(t)
	root := ws.Root()
	base := time.Now().Add(-time.Hour)
	for i, f := range searchTree {
		writeFiles(t, root, map[string]string{f.name: f.content})
		mt := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(filepath.Join(root, f.name), mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	symlink(t, "a.txt", filepath.Join(root, "sub", "alink.txt"))
	if err := os.WriteFile(filepath.Join(outside, "leak.go"), []byte("package hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return ws, outside
}

// lines splits output into its lines.
func lines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// checkListing checks the result of a tool that lists lines: an error, or
// not, as isError says; an output that contains has when has is set or
// the result is an error, and otherwise the lines want.
func checkListing(t *testing.T, res Result, isError bool, has string, want []string) {
	t.Helper()
	if res.IsError != isError {
		t.Fatalf("IsError = %v, want %v (%q)", res.IsError, isError, res.Output)
	}
	if has != "" || isError {
		if !strings.Contains(res.Output, has) {
			t.Errorf("output %q does not contain %q", res.Output, has)
		}
		return
	}
	if diff := cmp.Diff(want, lines(res.Output)); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

func TestGlob(t *testing.T) {
	ws, outside := newSearchWorkspace(t)
	root := ws.Root()
	tests := map[string]struct {
		in      map[string]any
		want    []string // output lines
		isError bool
	}{
		"recursive go":      {in: map[string]any{"pattern": "**/*.go"}, want: []string{"internal/x/x_test.go", "internal/x/x.go", "cmd/tool/main.go", "main.go"}},
		"top level only":    {in: map[string]any{"pattern": "*.go"}, want: []string{"main.go"}},
		"braces":            {in: map[string]any{"pattern": "web/*.{ts,tsx}"}, want: []string{"web/app.tsx", "web/app.ts"}},
		"recursive braces":  {in: map[string]any{"pattern": "**/*.{ts,tsx}"}, want: []string{"web/app.tsx", "web/app.ts"}},
		"question mark":     {in: map[string]any{"pattern": "?.txt"}, want: []string{"b.txt", "a.txt"}},
		"class":             {in: map[string]any{"pattern": "[a].txt"}, want: []string{"a.txt"}},
		"negated class":     {in: map[string]any{"pattern": "[!a].txt"}, want: []string{"b.txt"}},
		"literal prefix":    {in: map[string]any{"pattern": "cmd/*/main.go"}, want: []string{"cmd/tool/main.go"}},
		"literal file":      {in: map[string]any{"pattern": "internal/x/x.go"}, want: []string{"internal/x/x.go"}},
		"path":              {in: map[string]any{"pattern": "**/*.go", "path": "internal"}, want: []string{"internal/x/x_test.go", "internal/x/x.go"}},
		"absolute path":     {in: map[string]any{"pattern": "*.go", "path": filepath.Join(root, "internal/x")}, want: []string{"internal/x/x_test.go", "internal/x/x.go"}},
		"absolute pattern":  {in: map[string]any{"pattern": filepath.Join(root, "cmd/**/*.go")}, want: []string{"cmd/tool/main.go"}},
		"ignored skipped":   {in: map[string]any{"pattern": "**/*.js"}, want: []string{"sub/dist/keep.js", "web/app.js"}},
		"ignored md":        {in: map[string]any{"pattern": "**/*.md"}, want: []string{"docs/guide.md", "README.md"}},
		"ignored file":      {in: map[string]any{"pattern": "*.log"}, want: nil},
		"explicit ignored":  {in: map[string]any{"pattern": "node_modules/**/*.js"}, want: []string{"node_modules/dep/index.js"}},
		"dotfiles":          {in: map[string]any{"pattern": ".git*"}, want: []string{".gitignore"}},
		"symlink inside":    {in: map[string]any{"pattern": "inlink/*.txt"}, want: []string{"sub/a.txt", "sub/alink.txt"}},
		"no matches":        {in: map[string]any{"pattern": "**/*.rs"}, want: []string{"No files found"}},
		"bad pattern":       {in: map[string]any{"pattern": "[abc"}, isError: true},
		"missing path":      {in: map[string]any{"pattern": "*", "path": "nope"}, isError: true},
		"path is a file":    {in: map[string]any{"pattern": "*", "path": "main.go"}, isError: true},
		"empty pattern":     {in: map[string]any{"pattern": ""}, isError: true},
		"dotdot pattern":    {in: map[string]any{"pattern": "../outside/*"}, isError: true},
		"absolute outside":  {in: map[string]any{"pattern": outside + "/*"}, isError: true},
		"root pattern":      {in: map[string]any{"pattern": "/**/*.go"}, isError: true},
		"symlinked dir out": {in: map[string]any{"pattern": "etc/*"}, isError: true},
		"path outside":      {in: map[string]any{"pattern": "*", "path": "updown"}, isError: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			want := tt.want
			if want == nil {
				want = []string{"No files found"}
			}
			checkListing(t, run(t, &Glob{}, ws, tt.in), tt.isError, "", want)
		})
	}
}

func TestGlobNeverLeavesWorkspace(t *testing.T) {
	ws, _ := newSearchWorkspace(t)
	res := run(t, &Glob{}, ws, map[string]any{"pattern": "**/*"})
	if res.IsError {
		t.Fatal(res.Output)
	}
	for _, l := range lines(res.Output) {
		switch {
		case strings.Contains(l, "secret"), strings.Contains(l, "leak.go"), strings.HasPrefix(l, "/"), strings.HasPrefix(l, ".."):
			t.Errorf("listed %q", l)
		case strings.HasPrefix(l, "etc/"), strings.HasPrefix(l, "updown/"), strings.HasPrefix(l, "sub/deep/up/"):
			t.Errorf("followed a symlinked directory: %q", l)
		case l == "etc" || l == "updown" || l == "dangling_out" || l == "chain" || l == "sub/secretlink":
			t.Errorf("listed a symlink that leads outside: %q", l)
		}
	}
	if !strings.Contains(res.Output, "sub/alink.txt\n") {
		t.Errorf("a symlink to a file inside is not listed: %q", res.Output)
	}
}

func TestGlobCap(t *testing.T) {
	ws := newWorkspace(t)
	for i := range MaxGlobResults + 5 {
		writeFiles(t, ws.Root(), map[string]string{fmt.Sprintf("d/f%04d.txt", i): ""})
	}
	res := run(t, &Glob{}, ws, map[string]any{"pattern": "d/*.txt"})
	got := lines(res.Output)
	if len(got) != MaxGlobResults+1 || got[MaxGlobResults] != "[showing 1000 of 1005 files; use a more specific pattern or path]" {
		t.Errorf("%d lines, last %q", len(got), got[len(got)-1])
	}
}
