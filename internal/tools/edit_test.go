package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEdit(t *testing.T) {
	const src = "package main\n\nfunc a() {\n\treturn\n}\n\nfunc b() {\n\treturn\n}\n"
	tests := map[string]struct {
		files   map[string]string
		in      map[string]any
		has     []string // substrings of the output
		file    string   // file to check afterwards
		content string
		isError bool
	}{
		"unique": {
			files: map[string]string{"m.go": src},
			in:    map[string]any{"file_path": "m.go", "old_string": "func a() {", "new_string": "func alpha() {"},
			has:   []string{"Edited m.go: replaced 1 occurrence.", "     3\tfunc alpha() {\n"},
			file:  "m.go", content: strings.Replace(src, "func a()", "func alpha()", 1),
		},
		"multi-line old_string": {
			files: map[string]string{"m.go": src},
			in:    map[string]any{"file_path": "m.go", "old_string": "func b() {\n\treturn\n}", "new_string": "func b() {\n\tprintln()\n}"},
			file:  "m.go", content: strings.Replace(src, "func b() {\n\treturn", "func b() {\n\tprintln()", 1),
			has: []string{"     8\t\tprintln()\n"},
		},
		"not unique": {
			files:   map[string]string{"m.go": src},
			in:      map[string]any{"file_path": "m.go", "old_string": "\treturn\n", "new_string": "\treturn nil\n"},
			has:     []string{"old_string occurs 2 times in m.go", "more surrounding context", "replace_all"},
			isError: true, file: "m.go", content: src,
		},
		"replace_all": {
			files: map[string]string{"m.go": src},
			in:    map[string]any{"file_path": "m.go", "old_string": "\treturn\n", "new_string": "\treturn nil\n", "replace_all": true},
			has:   []string{"replaced 2 occurrences"},
			file:  "m.go", content: strings.ReplaceAll(src, "\treturn\n", "\treturn nil\n"),
		},
		"replace_all single": {
			files: map[string]string{"m.go": src},
			in:    map[string]any{"file_path": "m.go", "old_string": "package main", "new_string": "package x", "replace_all": true},
			has:   []string{"replaced 1 occurrence"},
			file:  "m.go", content: strings.Replace(src, "package main", "package x", 1),
		},
		"delete text": {
			files: map[string]string{"m.go": src},
			in:    map[string]any{"file_path": "m.go", "old_string": "\nfunc b() {\n\treturn\n}\n", "new_string": ""},
			file:  "m.go", content: "package main\n\nfunc a() {\n\treturn\n}\n",
		},
		"not found": {
			files:   map[string]string{"m.go": src},
			in:      map[string]any{"file_path": "m.go", "old_string": "func c()", "new_string": "func d()"},
			has:     []string{"old_string was not found in m.go", "exactly, including whitespace"},
			isError: true, file: "m.go", content: src,
		},
		"not found, crlf hint": {
			files:   map[string]string{"w.txt": "a\r\nb\r\n"},
			in:      map[string]any{"file_path": "w.txt", "old_string": "a\nb", "new_string": "c"},
			has:     []string{"CRLF"},
			isError: true,
		},
		"identical": {
			files:   map[string]string{"m.go": src},
			in:      map[string]any{"file_path": "m.go", "old_string": "a", "new_string": "a"},
			has:     []string{"old_string and new_string are identical"},
			isError: true,
		},
		"missing file": {
			in:      map[string]any{"file_path": "nope.go", "old_string": "x", "new_string": "y"},
			has:     []string{"File does not exist: nope.go", "Write"},
			isError: true,
		},
		"create with empty old_string": {
			in:   map[string]any{"file_path": "new/file.txt", "old_string": "", "new_string": "hello\n"},
			has:  []string{"Created new/file.txt (6 bytes, 1 line)"},
			file: "new/file.txt", content: "hello\n",
		},
		"empty old_string on existing file": {
			files:   map[string]string{"m.go": src},
			in:      map[string]any{"file_path": "m.go", "old_string": "", "new_string": "x"},
			has:     []string{"already exists and is not empty"},
			isError: true, file: "m.go", content: src,
		},
		"empty old_string on empty file": {
			files: map[string]string{"e.txt": ""},
			in:    map[string]any{"file_path": "e.txt", "old_string": "", "new_string": "x\n"},
			file:  "e.txt", content: "x\n",
		},
		"directory": {
			files:   map[string]string{"d/f": ""},
			in:      map[string]any{"file_path": "d", "old_string": "x", "new_string": "y"},
			has:     []string{"it is a directory"},
			isError: true,
		},
		"binary": {
			files:   map[string]string{"b.bin": "a\x00b"},
			in:      map[string]any{"file_path": "b.bin", "old_string": "a", "new_string": "c"},
			has:     []string{"binary file"},
			isError: true,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			ws := newWorkspace(t)
			writeFiles(t, ws.Root(), tt.files)
			res := run(t, &Edit{}, ws, tt.in)
			if res.IsError != tt.isError {
				t.Errorf("IsError = %v, want %v (%q)", res.IsError, tt.isError, res.Output)
			}
			for _, s := range tt.has {
				if !strings.Contains(res.Output, s) {
					t.Errorf("output %q does not contain %q", res.Output, s)
				}
			}
			if tt.file != "" {
				if got := readFile(t, ws.Root(), tt.file); got != tt.content {
					t.Errorf("content =\n%q\nwant\n%q", got, tt.content)
				}
			}
			assertNoTempFiles(t, ws.Root())
		})
	}
}

func TestEditPreservesMode(t *testing.T) {
	ws := newWorkspace(t)
	writeFiles(t, ws.Root(), map[string]string{"run.sh": "echo a\n"})
	p := filepath.Join(ws.Root(), "run.sh")
	if err := os.Chmod(p, 0o750); err != nil {
		t.Fatal(err)
	}
	res := run(t, &Edit{}, ws, map[string]any{"file_path": "run.sh", "old_string": "a", "new_string": "b"})
	if res.IsError {
		t.Fatal(res.Output)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("mode = %v, %v; want 0750", fi.Mode(), err)
	}
}

func TestEditConfinement(t *testing.T) {
	ws, outside := confinementTree(t)
	for _, p := range []string{"../outside/secret", filepath.Join(outside, "secret"), "etc/secret", "updown/secret", "sub/secretlink", "chain", "etc/new"} {
		t.Run(p, func(t *testing.T) {
			res := run(t, &Edit{}, ws, map[string]any{"file_path": p, "old_string": "secret", "new_string": "pwned"})
			if !res.IsError || !strings.Contains(res.Output, "outside the workspace") {
				t.Errorf("result = %+v", res)
			}
			res = run(t, &Edit{}, ws, map[string]any{"file_path": p, "old_string": "", "new_string": "pwned"})
			if !res.IsError {
				t.Errorf("create: result = %+v", res)
			}
		})
	}
	if got := readFile(t, outside, "secret"); got != "secret\n" {
		t.Errorf("secret = %q", got)
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); err == nil {
		t.Error("created a file outside")
	}
}
