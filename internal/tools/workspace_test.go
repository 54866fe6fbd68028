package tools

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// confinementTree builds a workspace with symlinks of every kind, and a
// directory outside it.
func confinementTree(t testing.TB) (ws *Workspace, outside string) {
	t.Helper()
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	outside = filepath.Join(parent, "outside")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "sub", "deep"), 0o755))
	must(os.MkdirAll(outside, 0o755))
	must(os.WriteFile(filepath.Join(root, "sub", "a.txt"), []byte("a\n"), 0o644))
	must(os.WriteFile(filepath.Join(outside, "secret"), []byte("secret\n"), 0o644))
	links := map[string]string{
		"etc":              outside,                           // absolute, outside
		"inlink":           "sub",                             // relative, inside
		"absin":            filepath.Join(root, "sub"),        // absolute, inside
		"updown":           "../outside",                      // relative, outside
		"dangling_out":     filepath.Join(outside, "newfile"), // dangling, outside
		"dangling_in":      "sub/new.txt",                     // dangling, inside
		"loop1":            "loop2",
		"loop2":            "loop1",
		"sub/deep/up":      "../..",                      // the root itself
		"sub/deep/upup":    "../../..",                   // the root's parent
		"sub/secretlink":   "../etc/secret",              // through another link
		"sub/viamissing":   "missing/../../etc/secret",   // ".." after a missing dir
		"sub/viamissingin": "missing/../deep/../a.txt",   // stays inside
		"chain":            "sub/deep/up/sub/secretlink", // link → link → outside
	}
	for link, target := range links {
		must(os.Symlink(target, filepath.Join(root, link)))
	}
	ws, err := NewWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	return ws, outside
}

func TestResolve(t *testing.T) {
	ws, outside := confinementTree(t)
	root := ws.Root()
	tests := map[string]struct {
		path    string
		want    string // relative to root, when resolved
		outside bool   // refused with ErrOutsideWorkspace
		err     bool   // refused for another reason
	}{
		"relative file":               {path: "sub/a.txt", want: "sub/a.txt"},
		"dot":                         {path: ".", want: "."},
		"dot slash":                   {path: "./sub/./a.txt", want: "sub/a.txt"},
		"trailing slash":              {path: "sub/", want: "sub"},
		"absolute inside":             {path: filepath.Join(root, "sub/a.txt"), want: "sub/a.txt"},
		"absolute root":               {path: root, want: "."},
		"new file":                    {path: "new/dir/file.txt", want: "new/dir/file.txt"},
		"symlink inside":              {path: "inlink/a.txt", want: "sub/a.txt"},
		"absolute symlink inside":     {path: "absin/a.txt", want: "sub/a.txt"},
		"dangling inside":             {path: "dangling_in", want: "sub/new.txt"},
		"up to root":                  {path: "sub/deep/up/sub/a.txt", want: "sub/a.txt"},
		"missing then dotdot inside":  {path: "sub/viamissingin", want: "sub/a.txt"},
		"dotdot":                      {path: "../x", outside: true},
		"dotdot inside":               {path: "sub/../sub/a.txt", outside: true},
		"dotdot absolute":             {path: root + "/sub/../../x", outside: true},
		"absolute outside":            {path: "/etc/passwd", outside: true},
		"absolute sibling prefix":     {path: root + "x/file", outside: true},
		"symlink outside":             {path: "etc/secret", outside: true},
		"symlink outside itself":      {path: "etc", outside: true},
		"symlink outside new file":    {path: "etc/new/file", outside: true},
		"relative symlink outside":    {path: "updown/secret", outside: true},
		"dangling outside":            {path: "dangling_out", outside: true},
		"up past root":                {path: "sub/deep/upup/outside/secret", outside: true},
		"link through link":           {path: "sub/secretlink", outside: true},
		"missing then dotdot outside": {path: "sub/viamissing", outside: true},
		"chain":                       {path: "chain", outside: true},
		"loop":                        {path: "loop1", err: true},
		"empty":                       {path: "", err: true},
		"nul":                         {path: "a\x00b", err: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ws.Resolve(tt.path)
			switch {
			case tt.outside:
				if !errors.Is(err, ErrOutsideWorkspace) {
					t.Fatalf("Resolve(%q) = %q, %v; want ErrOutsideWorkspace", tt.path, got, err)
				}
				if strings.Contains(err.Error(), "secret\n") {
					t.Errorf("error leaks content: %v", err)
				}
			case tt.err:
				if err == nil || errors.Is(err, ErrOutsideWorkspace) {
					t.Fatalf("Resolve(%q) = %q, %v; want a non-confinement error", tt.path, got, err)
				}
			default:
				if err != nil {
					t.Fatalf("Resolve(%q): %v", tt.path, err)
				}
				if want := filepath.Join(root, tt.want); got != want {
					t.Errorf("Resolve(%q) = %q, want %q", tt.path, got, want)
				}
			}
		})
	}
	_ = outside
}

func TestNewWorkspace(t *testing.T) {
	parent := t.TempDir()
	real := filepath.Join(parent, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, real, map[string]string{"f.txt": "x"})
	link := filepath.Join(parent, "link")
	symlink(t, real, link)

	ws, err := NewWorkspace(link)
	if err != nil {
		t.Fatal(err)
	}
	if ws.Root() != real {
		t.Errorf("Root() = %q, want %q (symlinks resolved)", ws.Root(), real)
	}
	// The root as given is accepted too.
	if got, err := ws.Resolve(filepath.Join(link, "f.txt")); err != nil || got != filepath.Join(real, "f.txt") {
		t.Errorf("Resolve through the given root = %q, %v", got, err)
	}
	if got := ws.Rel(filepath.Join(real, "a", "b")); got != "a/b" {
		t.Errorf("Rel = %q", got)
	}
	if got := ws.Rel(real); got != "." {
		t.Errorf("Rel(root) = %q", got)
	}
	if got := ws.Rel("/etc/passwd"); got != "/etc/passwd" {
		t.Errorf("Rel(outside) = %q", got)
	}

	created := filepath.Join(parent, "new", "nested")
	if _, err := NewWorkspace(created); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(created); err != nil || !fi.IsDir() {
		t.Errorf("root not created: %v", err)
	}
	if _, err := NewWorkspace(filepath.Join(real, "f.txt")); err == nil {
		t.Error("NewWorkspace on a file: no error")
	}
	if _, err := NewWorkspace(""); err == nil {
		t.Error("NewWorkspace(\"\"): no error")
	}
}

// FuzzResolve checks that Resolve never returns a path outside the root,
// nor one whose existing part leads outside through a symlink.
func FuzzResolve(f *testing.F) {
	ws, _ := confinementTree(f)
	root := ws.Root()
	for _, seed := range []string{
		"sub/a.txt", ".", "../x", "/etc/passwd", "etc/secret", "inlink/a.txt",
		"sub/deep/upup/outside", "dangling_out", "sub/viamissing", "chain/x",
		root + "/sub", root + "/../x", "//", "sub//deep/./up/etc", "loop1/x",
		"sub/deep/up/sub/deep/up/updown", "a\\..\\b", "~/x", "…/x",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := ws.Resolve(p)
		if err != nil {
			return
		}
		if !within(root, got) {
			t.Fatalf("Resolve(%q) = %q, outside %q", p, got, root)
		}
		if filepath.Clean(got) != got {
			t.Fatalf("Resolve(%q) = %q, not clean", p, got)
		}
		// The deepest existing ancestor, fully resolved, is inside too.
		existing := got
		for {
			if _, err := os.Lstat(existing); err == nil || !errors.Is(err, fs.ErrNotExist) {
				break
			}
			existing = filepath.Dir(existing)
		}
		real, err := filepath.EvalSymlinks(existing)
		if err != nil {
			return // e.g. ENOTDIR: nothing exists there to escape through
		}
		if !within(root, real) {
			t.Fatalf("Resolve(%q) = %q, which resolves to %q outside %q", p, got, real, root)
		}
	})
}

// TestResolveNamesOnlyTheGivenPath: the walk runs in the worker, so a
// symlink to /proc/self/… would lead it to the worker's own files. A
// refusal names the path the model gave and nothing the walk found:
// not the worker's open files, not its binary, not what lies outside.
func TestResolveNamesOnlyTheGivenPath(t *testing.T) {
	ws, outside := confinementTree(t)
	secret := filepath.Join(outside, "secret")
	f, err := os.Open(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	exe, _ := os.Executable()
	links := map[string]string{
		"fd":      "/proc/self/fd/" + strconv.Itoa(int(f.Fd())),
		"exe":     "/proc/self/exe",
		"cwd":     "/proc/self/cwd",
		"procdir": "/proc/self/fd",
		"via":     "etc/secret", // through the link to outside
	}
	for link, target := range links {
		if err := os.Symlink(target, filepath.Join(ws.Root(), link)); err != nil {
			t.Fatal(err)
		}
	}
	for link := range links {
		for _, p := range []string{link, link + "/x"} {
			_, err := ws.Resolve(p)
			if !errors.Is(err, ErrOutsideWorkspace) {
				t.Fatalf("Resolve(%q): %v, want ErrOutsideWorkspace", p, err)
			}
			msg := err.Error()
			for _, leak := range []string{"/proc", outside, secret, exe, "secret"} {
				if strings.Contains(msg, leak) {
					t.Errorf("Resolve(%q): %q names %q", p, msg, leak)
				}
			}
			if !strings.Contains(msg, strconv.Quote(p)) {
				t.Errorf("Resolve(%q): %q does not name the path given", p, msg)
			}
		}
	}
}

// TestResolveThroughTheGivenRoot: a workspace given through a symlinked
// parent (/tmp on some systems) still resolves an absolute link that
// names it as given: the walk may pass through the directories on the
// way to either form of the root.
func TestResolveThroughTheGivenRoot(t *testing.T) {
	parent := t.TempDir()
	real := filepath.Join(parent, "real")
	if err := os.MkdirAll(filepath.Join(real, "ws", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(parent, "alias")); err != nil {
		t.Fatal(err)
	}
	given := filepath.Join(parent, "alias", "ws")
	ws, err := NewWorkspace(given)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := os.Symlink(filepath.Join(given, "sub"), filepath.Join(ws.Root(), "link")); err != nil {
		t.Fatal(err)
	}
	got, err := ws.Resolve("link/f.txt")
	if want := filepath.Join(ws.Root(), "sub", "f.txt"); err != nil || got != want {
		t.Errorf("Resolve = %q, %v; want %q", got, err, want)
	}
}
