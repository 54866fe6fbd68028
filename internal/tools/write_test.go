package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	ws := newWorkspace(t)
	root := ws.Root()
	writeFiles(t, root, map[string]string{"existing.txt": "old\n", "adir/x": ""})
	if err := os.Chmod(filepath.Join(root, "existing.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		in      map[string]any
		want    string
		file    string // file to check, relative to root
		content string
		isError bool
	}{
		"new file": {
			in:   map[string]any{"file_path": "new.txt", "content": "a\nb\n"},
			want: "Created new.txt (4 bytes, 2 lines)", file: "new.txt", content: "a\nb\n",
		},
		"nested dirs": {
			in:   map[string]any{"file_path": "x/y/z.go", "content": "package z"},
			want: "Created x/y/z.go (9 bytes, 1 line)", file: "x/y/z.go", content: "package z",
		},
		"absolute inside": {
			in:   map[string]any{"file_path": filepath.Join(root, "abs.txt"), "content": "abs"},
			want: "Created abs.txt (3 bytes, 1 line)", file: "abs.txt", content: "abs",
		},
		"empty content": {
			in:   map[string]any{"file_path": "empty.txt", "content": ""},
			want: "Created empty.txt (0 bytes, 0 lines)", file: "empty.txt", content: "",
		},
		"overwrite": {
			in:   map[string]any{"file_path": "existing.txt", "content": "new\n"},
			want: "Updated existing.txt (4 bytes, 1 line)", file: "existing.txt", content: "new\n",
		},
		"directory": {
			in:      map[string]any{"file_path": "adir", "content": "x"},
			want:    "Cannot write adir: it is a directory",
			isError: true,
		},
		"parent is a file": {
			in:      map[string]any{"file_path": "existing.txt/child", "content": "x"},
			isError: true,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			res := run(t, &Write{}, ws, tt.in)
			if res.IsError != tt.isError {
				t.Errorf("IsError = %v, want %v (%q)", res.IsError, tt.isError, res.Output)
			}
			if tt.want != "" && res.Output != tt.want {
				t.Errorf("output = %q, want %q", res.Output, tt.want)
			}
			if tt.file != "" {
				if got := readFile(t, root, tt.file); got != tt.content {
					t.Errorf("content = %q, want %q", got, tt.content)
				}
			}
		})
	}
	if fi, err := os.Stat(filepath.Join(root, "existing.txt")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode not preserved: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(root, "new.txt")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("new file mode: %v %v", fi.Mode(), err)
	}
	assertNoTempFiles(t, root)
}

// assertNoTempFiles checks that no atomic-write temporary file was left.
func assertNoTempFiles(t *testing.T, root string) {
	t.Helper()
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".tmp-") {
			t.Errorf("temporary file left: %s", p)
		}
		return nil
	})
}

func TestWriteConfinement(t *testing.T) {
	ws, outside := confinementTree(t)
	tests := map[string]string{
		"dotdot":                      "../outside/new",
		"absolute outside":            filepath.Join(outside, "new"),
		"etc":                         "/etc/tools-test-should-not-exist",
		"symlinked file outside":      "etc/secret",
		"symlinked dir, new file":     "etc/new-file",
		"symlinked dir, new dirs":     "etc/a/b/new-file",
		"relative symlinked dir":      "updown/new-file",
		"dangling symlink to outside": "dangling_out",
		"symlink through missing dir": "sub/viamissing",
	}
	for name, p := range tests {
		t.Run(name, func(t *testing.T) {
			res := run(t, &Write{}, ws, map[string]any{"file_path": p, "content": "pwned\n"})
			if !res.IsError || !strings.Contains(res.Output, "outside the workspace") {
				t.Errorf("result = %+v", res)
			}
		})
	}
	// Nothing was written outside.
	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "secret" {
		t.Errorf("outside dir now holds %v", entries)
	}
	if got := readFile(t, outside, "secret"); got != "secret\n" {
		t.Errorf("secret = %q", got)
	}
	if _, err := os.Stat("/etc/tools-test-should-not-exist"); err == nil {
		t.Error("wrote to /etc")
	}
	// A dangling symlink that stays inside is followed.
	res := run(t, &Write{}, ws, map[string]any{"file_path": "dangling_in", "content": "ok"})
	if res.IsError || readFile(t, ws.Root(), "sub/new.txt") != "ok" {
		t.Errorf("result = %+v", res)
	}
}
