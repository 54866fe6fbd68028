package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
)

// TestRootRefusesEscapes calls the file operations with paths that were
// not resolved first, as if a symlink had been planted after Resolve: the
// root descriptor alone refuses them.
func TestRootRefusesEscapes(t *testing.T) {
	ws, outside := confinementTree(t)
	root := ws.Root()
	ops := map[string]func(p string) error{
		"openRegular": func(p string) error {
			f, _, err := ws.openRegular(p)
			if err == nil {
				f.Close()
			}
			return err
		},
		"stat": func(p string) error { _, err := ws.stat(p); return err },
		"openDir": func(p string) error {
			d, err := ws.openDir(p, nil)
			if err == nil {
				d.Close()
			}
			return err
		},
		"writeFile under": func(p string) error {
			_, err := ws.writeFile(filepath.Join(p, "new"), []byte("pwned\n"), 0o644)
			return err
		},
		"writeFile": func(p string) error {
			_, err := ws.writeFile(p, []byte("pwned\n"), 0o644)
			return err
		},
	}
	paths := map[string]struct {
		path string
		// lastIsLink: the symlink out is the last component, which
		// writeFile neither follows nor replaces.
		lastIsLink bool
	}{
		"absolute symlink":      {"etc", true},
		"relative symlink":      {"updown", true},
		"through it":            {"etc/secret", false},
		"through it, relative":  {"updown/secret", false},
		"symlink to the parent": {"sub/deep/upup", true},
		"through the parent":    {"sub/deep/upup/outside/secret", false},
		"link to a link":        {"sub/secretlink", true},
		"chain":                 {"chain", true},
		"dangling, outside":     {"dangling_out", true},
		"new dirs under it":     {"updown/a/b", false},
	}
	for opName, op := range ops {
		for pathName, tt := range paths {
			t.Run(opName+"/"+pathName, func(t *testing.T) {
				want := ErrOutsideWorkspace
				if opName == "writeFile" && tt.lastIsLink {
					want = errNotRegular
				}
				err := op(filepath.Join(root, tt.path))
				if !errors.Is(err, want) {
					t.Errorf("%s(%s) = %v, want %v", opName, tt.path, err, want)
				}
				if err != nil && strings.Contains(err.Error(), outside) {
					t.Errorf("the error names the outside: %v", err)
				}
			})
		}
	}
	for _, tt := range paths {
		if tt.lastIsLink {
			if fi, err := os.Lstat(filepath.Join(root, tt.path)); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
				t.Errorf("the symlink %s was replaced: %v", tt.path, err)
			}
		}
		err := walkFiles(context.Background(), ws, filepath.Join(root, tt.path), &ignoreRules{},
			func(string) bool { return true },
			func(e walkEntry) error { return fmt.Errorf("visited %s", e.rootRel) })
		if err != nil {
			t.Errorf("walkFiles(%s): %v", tt.path, err)
		}
	}
	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || readFile(t, outside, "secret") != "secret\n" {
		t.Errorf("the outside directory changed: %v", entries)
	}
}

// TestRootEscapeError checks that os.Root's error for a path that leaves
// it is still told apart from other errors: it is not exported, and a Go
// release could change it.
func TestRootEscapeError(t *testing.T) {
	ws, _ := confinementTree(t)
	if ws.escapes == nil {
		t.Fatal("no escape error found")
	}
	_, err := ws.dir.Stat("etc/secret")
	if !errors.Is(ws.confined("etc/secret", err), ErrOutsideWorkspace) {
		t.Errorf("a symlink out: %v is not reported as outside", err)
	}
	_, err = ws.dir.Stat("missing")
	if got := ws.confined("missing", err); errors.Is(got, ErrOutsideWorkspace) || !errors.Is(got, fs.ErrNotExist) {
		t.Errorf("a missing file: %v", got)
	}
	if got := ws.confined("x", nil); got != nil {
		t.Errorf("confined(nil) = %v", got)
	}
}

// hardLinkTree is a workspace holding "hl.txt", a hard link to a file
// outside, and a directory with another one.
func hardLinkTree(t *testing.T) (ws *Workspace, outsideFile string) {
	t.Helper()
	ws, outside := confinementTree(t)
	outsideFile = filepath.Join(outside, "linked.txt")
	if err := os.WriteFile(outsideFile, []byte("outside content\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"hl.txt", "sub/deep/hl2.txt"} {
		if err := os.Link(outsideFile, filepath.Join(ws.Root(), name)); err != nil {
			t.Skipf("cannot make a hard link: %v", err)
		}
	}
	return ws, outsideFile
}

func TestHardLinks(t *testing.T) {
	t.Run("read refused", func(t *testing.T) {
		ws, _ := hardLinkTree(t)
		tests := map[string]struct {
			tool Tool
			in   map[string]any
		}{
			"Read":          {&Read{}, map[string]any{"file_path": "hl.txt"}},
			"Edit":          {&Edit{}, map[string]any{"file_path": "hl.txt", "old_string": "outside", "new_string": "pwned"}},
			"Edit, empty":   {&Edit{}, map[string]any{"file_path": "hl.txt", "old_string": "", "new_string": "pwned"}},
			"Grep the file": {&Grep{}, map[string]any{"pattern": "content", "path": "hl.txt"}},
		}
		for name, tt := range tests {
			t.Run(name, func(t *testing.T) {
				res := run(t, tt.tool, ws, tt.in)
				if !res.IsError || !strings.Contains(res.Output, "hl.txt: it has 3 hard links") ||
					!strings.Contains(res.Output, "another name for a file outside the workspace") {
					t.Errorf("result = %+v", res)
				}
				if strings.Contains(res.Output, "outside content") {
					t.Errorf("content leaked: %q", res.Output)
				}
			})
		}
	})
	t.Run("Grep skips them", func(t *testing.T) {
		ws, _ := hardLinkTree(t)
		writeFiles(t, ws.Root(), map[string]string{"plain.txt": "plain content\n"})
		res := run(t, &Grep{}, ws, map[string]any{"pattern": "content", "output_mode": "content"})
		want := "plain.txt:1:plain content\n[skipped 2 files with more than one hard link, which may be another name for a file outside the workspace: hl.txt, sub/deep/hl2.txt]\n"
		if res.IsError || res.Output != want {
			t.Errorf("result = %q, want %q", res.Output, want)
		}
	})
	t.Run("Glob and LS list them", func(t *testing.T) {
		ws, _ := hardLinkTree(t)
		if res := run(t, &Glob{}, ws, map[string]any{"pattern": "hl.txt"}); res.Output != "hl.txt\n" {
			t.Errorf("Glob = %+v", res)
		}
		if res := run(t, &LS{}, ws, map[string]any{"path": "sub/deep"}); !strings.Contains(res.Output, "  - hl2.txt\n") {
			t.Errorf("LS = %+v", res)
		}
	})
	t.Run("Write replaces the link", func(t *testing.T) {
		ws, outsideFile := hardLinkTree(t)
		res := run(t, &Write{}, ws, map[string]any{"file_path": "hl.txt", "content": "new\n"})
		if res.IsError || res.Output != "Updated hl.txt (4 bytes, 1 line)" {
			t.Fatalf("result = %+v", res)
		}
		checkReplaced(t, ws, "hl.txt", "new\n", outsideFile, 2)
		// Now a file of its own, it reads and edits as any other.
		if res := run(t, &Edit{}, ws, map[string]any{"file_path": "hl.txt", "old_string": "new", "new_string": "edited"}); res.IsError {
			t.Fatalf("Edit after Write: %+v", res)
		}
		if res := run(t, &Read{}, ws, map[string]any{"file_path": "hl.txt"}); res.Output != "     1\tedited\n" {
			t.Errorf("Read after Write: %+v", res)
		}
	})
}

// checkReplaced checks that name in ws holds content as a file of its own
// with the linked file's permission bits, and that the file outside is
// unchanged, with links hard links left.
func checkReplaced(t *testing.T, ws *Workspace, name, content, outsideFile string, links uint64) {
	t.Helper()
	if got := readFile(t, ws.Root(), name); got != content {
		t.Errorf("%s = %q, want %q", name, got, content)
	}
	if got := readFile(t, filepath.Dir(outsideFile), filepath.Base(outsideFile)); got != "outside content\n" {
		t.Errorf("the outside file changed: %q", got)
	}
	fi, err := os.Stat(filepath.Join(ws.Root(), name))
	if err != nil {
		t.Fatal(err)
	}
	ofi, err := os.Stat(outsideFile)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(fi, ofi) {
		t.Error("still the same file as the outside one")
	}
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode = %v, want 0640 (kept from the file replaced)", fi.Mode())
	}
	if got := fi.Sys().(*syscall.Stat_t).Nlink; uint64(got) != 1 {
		t.Errorf("%s has %d links", name, got)
	}
	if got := ofi.Sys().(*syscall.Stat_t).Nlink; uint64(got) != links {
		t.Errorf("the outside file has %d links, want %d", got, links)
	}
}

func TestOpen(t *testing.T) {
	ws, _ := hardLinkTree(t)
	root := ws.Root()
	writeFiles(t, root, map[string]string{"ok.txt": "ok\n"})
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := ws.Open("inlink/a.txt")
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil || string(data) != "a\n" {
		t.Errorf("Open through a symlink inside = %q, %v", data, err)
	}
	tests := map[string]struct {
		name string
		want error
	}{
		"outside":     {"etc/secret", ErrOutsideWorkspace},
		"dotdot":      {"../outside/secret", ErrOutsideWorkspace},
		"hard link":   {"hl.txt", ErrHardLinked},
		"missing":     {"nope", fs.ErrNotExist},
		"directory":   {"sub", ErrIsDir},
		"fifo":        {"fifo", errNotRegular}, // refused without blocking
		"not a dir":   {"ok.txt/x", syscall.ENOTDIR},
		"dangling in": {"dangling_in", fs.ErrNotExist},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			f, err := ws.Open(tt.name)
			if err == nil {
				f.Close()
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("Open(%q) = %v, want %v", tt.name, err, tt.want)
			}
		})
	}
}

func TestWriteFileErrors(t *testing.T) {
	ws, _ := confinementTree(t)
	root := ws.Root()
	writeFiles(t, root, map[string]string{"f.txt": "f\n"})
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		path string
		want error
	}{
		"the root":         {".", ErrIsDir},
		"a directory":      {"sub", ErrIsDir},
		"a fifo":           {"fifo", errNotRegular},
		"under a file":     {"f.txt/x", syscall.ENOTDIR},
		"outside the root": {"/etc/x", ErrOutsideWorkspace},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			p := tt.path
			if !filepath.IsAbs(p) {
				p = filepath.Join(root, p)
			}
			if _, err := ws.writeFile(p, []byte("x"), 0o644); !errors.Is(err, tt.want) {
				t.Errorf("writeFile(%s) = %v, want %v", tt.path, err, tt.want)
			}
		})
	}
	assertNoTempFiles(t, root)
	if got := readFile(t, root, "f.txt"); got != "f\n" {
		t.Errorf("f.txt = %q", got)
	}
}

func TestReadLimited(t *testing.T) {
	tests := map[string]struct {
		data        string
		size, limit int64
		wantErr     error
	}{
		"size right":        {data: "hello", size: 5, limit: 10},
		"size too small":    {data: strings.Repeat("x", 3000), size: 1, limit: 5000},
		"size too large":    {data: "hi", size: 100, limit: 10},
		"empty":             {data: "", size: 0, limit: 10},
		"at the limit":      {data: "0123456789", size: 10, limit: 10},
		"over the limit":    {data: "0123456789a", size: 10, limit: 10},
		"grew past it":      {data: strings.Repeat("x", 100), size: 5, limit: 50},
		"negative size":     {data: "abc", size: -1, limit: 10},
		"limit zero, empty": {data: "", size: 0, limit: 0},
		"limit zero":        {data: "a", size: 0, limit: 0},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := readLimited(iotest.HalfReader(strings.NewReader(tt.data)), tt.size, tt.limit)
			want := tt.wantErr
			if int64(len(tt.data)) > tt.limit {
				want = errTooLarge
			}
			if want != nil {
				if !errors.Is(err, want) {
					t.Errorf("readLimited = %q, %v; want %v", got, err, want)
				}
				return
			}
			if err != nil || string(got) != tt.data {
				t.Errorf("readLimited = %q, %v; want %q", got, err, tt.data)
			}
		})
	}
}

// TestSymlinksInside checks that every file tool still works through
// symlinks that stay inside the workspace, relative and absolute, now that
// the operations go through the root descriptor (which refuses absolute
// symlinks itself): Resolve hands it the real path.
func TestSymlinksInside(t *testing.T) {
	tests := map[string]struct {
		tool    Tool
		in      map[string]any
		want    string
		file    string // then sub/<file> must hold content
		content string
	}{
		"Read, relative":  {tool: &Read{}, in: map[string]any{"file_path": "inlink/a.txt"}, want: "     1\ta\n"},
		"Read, absolute":  {tool: &Read{}, in: map[string]any{"file_path": "absin/a.txt"}, want: "     1\ta\n"},
		"Write, absolute": {tool: &Write{}, in: map[string]any{"file_path": "absin/new.txt", "content": "n\n"}, want: "Created sub/new.txt (2 bytes, 1 line)", file: "new.txt", content: "n\n"},
		"Write, new dirs": {tool: &Write{}, in: map[string]any{"file_path": "inlink/x/y.txt", "content": "y\n"}, want: "Created sub/x/y.txt (2 bytes, 1 line)", file: "x/y.txt", content: "y\n"},
		"Write, dangling": {tool: &Write{}, in: map[string]any{"file_path": "dangling_in", "content": "d\n"}, want: "Created sub/new.txt (2 bytes, 1 line)", file: "new.txt", content: "d\n"},
		"Edit, absolute":  {tool: &Edit{}, in: map[string]any{"file_path": "absin/a.txt", "old_string": "a", "new_string": "b"}, want: "Edited sub/a.txt: replaced 1 occurrence.\n     1\tb\n", file: "a.txt", content: "b\n"},
		"Grep, absolute":  {tool: &Grep{}, in: map[string]any{"pattern": "a", "path": "absin", "output_mode": "content"}, want: "sub/a.txt:1:a\n"},
		"Grep, a file":    {tool: &Grep{}, in: map[string]any{"pattern": "a", "path": "inlink/a.txt", "output_mode": "content"}, want: "sub/a.txt:1:a\n"},
		"Glob, absolute":  {tool: &Glob{}, in: map[string]any{"pattern": "*.txt", "path": "absin"}, want: "sub/a.txt\n"},
		"LS, absolute":    {tool: &LS{}, in: map[string]any{"path": "absin", "ignore": []string{"deep"}}, want: "- sub/\n  - a.txt\n  - viamissingin -> sub/a.txt\n"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			ws, _ := confinementTree(t)
			res := run(t, tt.tool, ws, tt.in)
			if res.IsError || res.Output != tt.want {
				t.Errorf("result = %+v, want %q", res, tt.want)
			}
			if tt.file != "" {
				if got := readFile(t, filepath.Join(ws.Root(), "sub"), tt.file); got != tt.content {
					t.Errorf("sub/%s = %q, want %q", tt.file, got, tt.content)
				}
			}
		})
	}
}

// TestOpenChangedDir checks the guard against a directory swapped after it
// was listed: what is opened must be the directory listed, not one a
// symlink leads to, even inside.
func TestOpenChangedDir(t *testing.T) {
	ws, _ := confinementTree(t)
	root := ws.Root()
	d, err := ws.openDir(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	subFI, err := d.Lstat("sub")
	if err != nil {
		t.Fatal(err)
	}
	deepFI, err := d.Lstat("sub/deep")
	if err != nil {
		t.Fatal(err)
	}

	inlinkFI, err := d.Lstat("inlink")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := openSubdir(d, "sub", subFI)
	if err != nil {
		t.Fatalf("openSubdir(sub) = %v", err)
	}
	sub.Close()
	// Listed as a symlink: not opened.
	if _, err := openSubdir(d, "inlink", inlinkFI); !errors.Is(err, errChanged) {
		t.Errorf("openSubdir(inlink) = %v, want errChanged", err)
	}
	// Listed as a directory, a symlink to another one (inside) when
	// opened. (A symlink to the very directory listed is opened: what is
	// read is what was listed.)
	if _, err := openSubdir(d, "inlink", deepFI); !errors.Is(err, errChanged) {
		t.Errorf("openSubdir(inlink, deep's FileInfo) = %v, want errChanged", err)
	}
	// Listed as a directory, another one when opened.
	if _, err := openSubdir(d, "sub/deep", subFI); !errors.Is(err, errChanged) {
		t.Errorf("openSubdir(sub/deep, sub's FileInfo) = %v, want errChanged", err)
	}
	if _, err := openSubdir(d, "missing", subFI); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("openSubdir(missing) = %v, want ErrNotExist", err)
	}

	// The directory opened is not the one listed.
	if _, err := ws.openDir(filepath.Join(root, "sub"), deepFI); !errors.Is(err, errChanged) {
		t.Errorf("openDir(sub, deep's FileInfo) = %v, want errChanged", err)
	}
	if dd, err := ws.openDir(filepath.Join(root, "sub"), subFI); err != nil {
		t.Errorf("openDir(sub, its FileInfo) = %v", err)
	} else {
		dd.Close()
	}
	e := &lsEntry{abs: filepath.Join(root, "sub"), id: deepFI}
	if _, err := lsDir(ws, e); !errors.Is(err, errChanged) {
		t.Errorf("lsDir(sub, deep's FileInfo) = %v, want errChanged", err)
	}
	e.id = subFI
	if _, err := lsDir(ws, e); err != nil {
		t.Errorf("lsDir(sub, its FileInfo) = %v", err)
	}
}
