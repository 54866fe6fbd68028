package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	ws := newWorkspace(t)
	root := ws.Root()
	writeFiles(t, root, map[string]string{
		"five.txt":     "one\ntwo\nthree\nfour\nfive\n",
		"nofinal.txt":  "a\nb",
		"crlf.txt":     "a\r\nb\r\n",
		"empty.txt":    "",
		"blank.txt":    "\n",
		"long.txt":     strings.Repeat("x", 2500) + "\nshort\n",
		"utf8.txt":     strings.Repeat("é", 2001) + "\n",
		"hundred.txt":  numbered("line %d\n", 100),
		"binary.bin":   "ELF\x00\x01\x02",
		"dir/file.txt": "in dir\n",
	})
	if err := os.WriteFile(filepath.Join(root, "late-nul.txt"), append([]byte(strings.Repeat("a", 9000)), 0), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		in      map[string]any
		want    string
		has     string // substring, instead of want
		isError bool
	}{
		"whole file": {
			in:   map[string]any{"file_path": "five.txt"},
			want: "     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour\n     5\tfive\n",
		},
		"absolute path": {
			in:   map[string]any{"file_path": filepath.Join(root, "dir/file.txt")},
			want: "     1\tin dir\n",
		},
		"offset and limit": {
			in:   map[string]any{"file_path": "five.txt", "offset": 2, "limit": 2},
			want: "     2\ttwo\n     3\tthree\n\n[showed lines 2-3 of 5; continue with offset=4]\n",
		},
		"offset to the end": {
			in:   map[string]any{"file_path": "five.txt", "offset": 4},
			want: "     4\tfour\n     5\tfive\n",
		},
		"offset zero means one": {
			in:   map[string]any{"file_path": "five.txt", "offset": 0, "limit": 1},
			want: "     1\tone\n\n[showed lines 1-1 of 5; continue with offset=2]\n",
		},
		"offset past end": {
			in:      map[string]any{"file_path": "five.txt", "offset": 9},
			want:    "five.txt has 5 lines; offset 9 is past its end",
			isError: true,
		},
		"no final newline": {
			in:   map[string]any{"file_path": "nofinal.txt"},
			want: "     1\ta\n     2\tb\n",
		},
		"crlf": {
			in:   map[string]any{"file_path": "crlf.txt"},
			want: "     1\ta\n     2\tb\n",
		},
		"blank line": {
			in:   map[string]any{"file_path": "blank.txt"},
			want: "     1\t\n",
		},
		"empty": {
			in:   map[string]any{"file_path": "empty.txt"},
			want: "(empty.txt exists but is empty)",
		},
		"long line cut": {
			in:   map[string]any{"file_path": "long.txt"},
			want: "     1\t" + strings.Repeat("x", 2000) + " [… line truncated]\n     2\tshort\n",
		},
		"cut counts characters": {
			in:   map[string]any{"file_path": "utf8.txt"},
			want: "     1\t" + strings.Repeat("é", 2000) + " [… line truncated]\n",
		},
		"default limit 2000": {
			in:  map[string]any{"file_path": "hundred.txt", "limit": 10},
			has: "[showed lines 1-10 of 100; continue with offset=11]",
		},
		"binary": {
			in:      map[string]any{"file_path": "binary.bin"},
			want:    "Cannot read binary.bin: it is a binary file; Read only shows text files",
			isError: true,
		},
		"nul after 8 KiB is text": {
			in:  map[string]any{"file_path": "late-nul.txt"},
			has: "     1\taaaa",
		},
		"directory": {
			in:      map[string]any{"file_path": "dir"},
			want:    "dir is a directory, not a file; use LS (or Glob) to list its contents",
			isError: true,
		},
		"missing": {
			in:      map[string]any{"file_path": "nope.txt"},
			want:    "File does not exist: nope.txt",
			isError: true,
		},
		"negative offset": {
			in:      map[string]any{"file_path": "five.txt", "offset": -1},
			has:     `"offset" must not be negative`,
			isError: true,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			res := run(t, &Read{}, ws, tt.in)
			if res.IsError != tt.isError {
				t.Errorf("IsError = %v, want %v", res.IsError, tt.isError)
			}
			if tt.has != "" {
				if !strings.Contains(res.Output, tt.has) {
					t.Errorf("output %q does not contain %q", res.Output, tt.has)
				}
				return
			}
			if res.Output != tt.want {
				t.Errorf("output =\n%q\nwant\n%q", res.Output, tt.want)
			}
		})
	}
}

func TestReadOutputCap(t *testing.T) {
	ws := newWorkspace(t)
	writeFiles(t, ws.Root(), map[string]string{"f.txt": numbered("line %d\n", 100)})
	res := run(t, &Read{MaxOutputBytes: 300}, ws, map[string]any{"file_path": "f.txt"})
	if res.IsError {
		t.Fatal(res.Output)
	}
	// 300 bytes hold 20 lines of "%6d\tline N\n" (14-15 bytes each).
	if !strings.Contains(res.Output, "    20\tline 20\n") || strings.Contains(res.Output, "\tline 21\n") {
		t.Errorf("output = %q", res.Output)
	}
	if !strings.Contains(res.Output, "[output truncated to 300 bytes: showed lines 1-20 of 100; continue with offset=21]") {
		t.Errorf("no continuation note: %q", res.Output)
	}
}

func TestReadConfinement(t *testing.T) {
	ws, outside := confinementTree(t)
	for _, p := range []string{"../outside/secret", filepath.Join(outside, "secret"), "/etc/passwd", "etc/secret", "updown/secret", "sub/secretlink", "chain"} {
		t.Run(p, func(t *testing.T) {
			res := run(t, &Read{}, ws, map[string]any{"file_path": p})
			if !res.IsError || !strings.Contains(res.Output, "outside the workspace") {
				t.Errorf("result = %+v", res)
			}
			if strings.Contains(res.Output, "secret\n") {
				t.Errorf("content leaked: %q", res.Output)
			}
		})
	}
	// Inside through symlinks is fine.
	res := run(t, &Read{}, ws, map[string]any{"file_path": "inlink/a.txt"})
	if res.IsError || res.Output != "     1\ta\n" {
		t.Errorf("result = %+v", res)
	}
}
