package tools

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGrep(t *testing.T) {
	ws, outside := newSearchWorkspace(t)
	root := ws.Root()
	helloFiles := []string{
		"docs/guide.md", "sub/dist/keep.js", "web/app.js", "web/app.tsx", "web/app.ts",
		"internal/x/x.go", "cmd/tool/main.go", "README.md",
	}
	tests := map[string]struct {
		in      map[string]any
		want    []string // output lines
		has     string   // substring, instead of want
		isError bool
	}{
		"files_with_matches": {
			in:   map[string]any{"pattern": "hello"},
			want: append([]string{"Found 8 files"}, helloFiles...),
		},
		"explicit files_with_matches": {
			in:   map[string]any{"pattern": "hello", "output_mode": "files_with_matches", "path": "web"},
			want: []string{"Found 3 files", "web/app.js", "web/app.tsx", "web/app.ts"},
		},
		"ignore case": {
			in:   map[string]any{"pattern": "HELLO", "-i": true},
			want: append(append([]string{"Found 9 files"}, helloFiles...), "main.go"),
		},
		"content with glob": {
			in:   map[string]any{"pattern": "hello", "output_mode": "content", "glob": "*.go"},
			want: []string{"cmd/tool/main.go:3:// hello from tool", "internal/x/x.go:4:\treturn \"hello\""},
		},
		"content without numbers": {
			in:   map[string]any{"pattern": "hello", "output_mode": "content", "glob": "*.go", "-n": false},
			want: []string{"cmd/tool/main.go:// hello from tool", "internal/x/x.go:\treturn \"hello\""},
		},
		"glob with path": {
			in:   map[string]any{"pattern": "hello", "glob": "web/*.ts"},
			want: []string{"Found 1 file", "web/app.ts"},
		},
		"glob braces": {
			in:   map[string]any{"pattern": "hello", "glob": "**/*.{ts,tsx}"},
			want: []string{"Found 2 files", "web/app.tsx", "web/app.ts"},
		},
		"context": {
			in:   map[string]any{"pattern": "hello", "output_mode": "content", "path": "internal/x/x.go", "-C": 1},
			want: []string{"internal/x/x.go-3-func X() string {", "internal/x/x.go:4:\treturn \"hello\"", "internal/x/x.go-5-}"},
		},
		"-B overrides -C": {
			in:   map[string]any{"pattern": "hello", "output_mode": "content", "path": "internal/x/x.go", "-C": 1, "-B": 0},
			want: []string{"internal/x/x.go:4:\treturn \"hello\"", "internal/x/x.go-5-}"},
		},
		"-A": {
			in:   map[string]any{"pattern": "hello", "output_mode": "content", "path": "internal/x/x.go", "-A": 1},
			want: []string{"internal/x/x.go:4:\treturn \"hello\"", "internal/x/x.go-5-}"},
		},
		"count": {
			in:   map[string]any{"pattern": "hello|App", "output_mode": "count", "glob": "**/*.{ts,tsx}"},
			want: []string{"web/app.ts:1", "web/app.tsx:1", "", "Found 2 matches in total"},
		},
		"type": {
			in:   map[string]any{"pattern": "hello", "type": "go"},
			want: []string{"Found 2 files", "internal/x/x.go", "cmd/tool/main.go"},
		},
		"unknown type": {
			in:      map[string]any{"pattern": "hello", "type": "cobol"},
			has:     `Unknown file type "cobol"`,
			isError: true,
		},
		"head_limit files": {
			in:   map[string]any{"pattern": "hello", "head_limit": 2},
			want: []string{"Found 8 files", "docs/guide.md", "sub/dist/keep.js", "[head_limit 2 reached; there are more results]"},
		},
		"head_limit content": {
			in:   map[string]any{"pattern": "hello", "output_mode": "content", "head_limit": 1},
			want: []string{"README.md:2:hello world", "[head_limit 1 reached; there are more results]"},
		},
		"head_limit count": {
			in:   map[string]any{"pattern": "hello", "output_mode": "count", "head_limit": 1},
			want: []string{"README.md:1", "[head_limit 1 reached; there are more results]"},
		},
		"multiline": {
			in:   map[string]any{"pattern": `string \{\n\treturn`, "output_mode": "content", "multiline": true},
			want: []string{"internal/x/x.go:3:func X() string {", "internal/x/x.go:4:\treturn \"hello\""},
		},
		"multiline dot matches newline": {
			in:   map[string]any{"pattern": `package x.*hello`, "multiline": true, "output_mode": "count"},
			want: []string{"internal/x/x.go:1", "", "Found 1 match in total"},
		},
		"no multiline, no span": {
			in:   map[string]any{"pattern": `string \{\n\treturn`},
			want: []string{"No matches found"},
		},
		"anchors per line": {
			in:   map[string]any{"pattern": `^hello`, "output_mode": "content"},
			want: []string{"README.md:2:hello world", "docs/guide.md:1:hello", "sub/dist/keep.js:1:hello"},
		},
		"single file": {
			in:   map[string]any{"pattern": "hello", "output_mode": "content", "path": "README.md"},
			want: []string{"README.md:2:hello world"},
		},
		"absolute path": {
			in:   map[string]any{"pattern": "hello", "path": filepath.Join(root, "internal")},
			want: []string{"Found 1 file", "internal/x/x.go"},
		},
		"binary skipped": {
			in:   map[string]any{"pattern": "world"},
			want: []string{"Found 1 file", "README.md"},
		},
		"explicit ignored dir": {
			in:   map[string]any{"pattern": "hello", "path": "node_modules"},
			want: []string{"Found 1 file", "node_modules/dep/index.js"},
		},
		"no matches": {
			in:   map[string]any{"pattern": "zebra"},
			want: []string{"No matches found"},
		},
		"symlinks not followed": {
			in:   map[string]any{"pattern": "secret|package hello"},
			want: []string{"No matches found"},
		},
		"invalid regex": {
			in:      map[string]any{"pattern": "(foo"},
			has:     "missing closing )",
			isError: true,
		},
		"bad glob": {
			in:      map[string]any{"pattern": "x", "glob": "[a"},
			isError: true,
		},
		"missing path": {
			in:      map[string]any{"pattern": "x", "path": "nope"},
			isError: true,
		},
		"path through symlink outside": {
			in:      map[string]any{"pattern": "secret", "path": "etc"},
			has:     "outside the workspace",
			isError: true,
		},
		"path file through symlink outside": {
			in:      map[string]any{"pattern": "secret", "path": "sub/secretlink"},
			has:     "outside the workspace",
			isError: true,
		},
		"path dotdot": {
			in:      map[string]any{"pattern": "secret", "path": "../outside"},
			has:     "outside the workspace",
			isError: true,
		},
		"path absolute outside": {
			in:      map[string]any{"pattern": "secret", "path": outside},
			has:     "outside the workspace",
			isError: true,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			checkListing(t, run(t, &Grep{}, ws, tt.in), tt.isError, tt.has, tt.want)
		})
	}
}

func TestGrepContextSeparators(t *testing.T) {
	ws := newWorkspace(t)
	writeFiles(t, ws.Root(), map[string]string{
		"a.txt": "m1\na\nb\nc\nd\nm2\ne\n",
		"b.txt": "m3\n",
	})
	res := run(t, &Grep{}, ws, map[string]any{"pattern": "^m", "output_mode": "content", "-C": 1})
	want := []string{
		"a.txt:1:m1", "a.txt-2-a",
		"--",
		"a.txt-5-d", "a.txt:6:m2", "a.txt-7-e",
		"--",
		"b.txt:1:m3",
	}
	if diff := cmp.Diff(want, lines(res.Output)); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

func TestGrepOutputCap(t *testing.T) {
	ws := newWorkspace(t)
	var b strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&b, "match %d\n", i)
	}
	writeFiles(t, ws.Root(), map[string]string{"big.txt": b.String()})
	res := run(t, &Grep{MaxOutputBytes: 1000}, ws, map[string]any{"pattern": "match", "output_mode": "content"})
	if len(res.Output) > 1200 {
		t.Errorf("output is %d bytes", len(res.Output))
	}
	if !strings.HasPrefix(res.Output, "big.txt:1:match 0\n") || !strings.HasSuffix(res.Output, "big.txt:5000:match 4999\n") || !strings.Contains(res.Output, "[output truncated:") {
		t.Errorf("output = %q", res.Output)
	}
}
