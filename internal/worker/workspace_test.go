package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/tools"
)

// secret is what lies outside the conversation's workspace: no answer of
// the workspace view may ever contain it.
const secret = "outside-the-workspace-secret"

// viewFixture is a worker with two conversations, the first with a
// workspace full of traps, and a secret file beside the workspaces.
type viewFixture struct {
	tw       *testWorker
	conv     string
	ws       string // the first conversation's workspace
	stateDir string // its tools' state directory
	outside  string // a file outside every workspace, holding secret
}

// workspace opens f's workspace as the tools do, until the test ends.
func (f *viewFixture) workspace(t testing.TB) *tools.Workspace {
	t.Helper()
	ws, err := tools.NewWorkspace(f.ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws
}

func newViewFixture(t testing.TB) *viewFixture {
	t.Helper()
	tw := newTestWorker(t, workerOpts{})
	f := &viewFixture{tw: tw, conv: "c1"}
	tw.create(t, "c1")
	tw.create(t, "c2")
	f.ws = filepath.Join(tw.dir, "workspaces", "c1")
	s, err := tw.w.lookup(context.Background(), "c1")
	if err != nil {
		t.Fatal(err)
	}
	f.stateDir = tools.StateDirOf(s.store.Dir())
	f.outside = filepath.Join(tw.dir, "secret.txt")
	other := filepath.Join(tw.dir, "workspaces", "c2")
	for name, content := range map[string]string{
		f.outside:                              secret,
		filepath.Join(other, "theirs.txt"):     secret,
		filepath.Join(f.ws, "main.go"):         "package main\n",
		filepath.Join(f.ws, "src/lib.go"):      "package lib\n",
		filepath.Join(f.ws, "bin.dat"):         "\x00\x01\x02binary",
		filepath.Join(f.ws, "latin1.txt"):      "caf\xe9",
		filepath.Join(f.ws, "big.txt"):         strings.Repeat("x", contract.MaxFileView+1),
		filepath.Join(f.ws, ".hidden/conf"):    "k=v\n",
		filepath.Join(f.ws, "odd name %2e.md"): "# odd\n",
	} {
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"to-secret":     f.outside,
		"to-secret-rel": "../../secret.txt",
		"to-other":      "../c2",
		"to-main":       "main.go",
		"to-src":        "src",
		"loop-a":        "loop-b",
		"loop-b":        "loop-a",
		"dangling":      "nothing-here",
		"src/up":        "..",
		"to-root":       "/",
	} {
		if err := os.Symlink(target, filepath.Join(f.ws, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(f.outside, filepath.Join(f.ws, "hardlink.txt")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(f.ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// get sends a signed GET of path (with {id} the fixture's conversation)
// and raw query q.
func (f *viewFixture) get(t testing.TB, path, q string) (*http.Response, []byte) {
	t.Helper()
	u := strings.Replace(path, "{id}", f.conv, 1)
	if q != "" {
		u += "?" + q
	}
	resp, body := f.tw.call(t, http.MethodGet, u, nil)
	if strings.Contains(string(body), secret) {
		t.Fatalf("GET %s answered the secret: %s", u, body)
	}
	return resp, body
}

func pathQuery(p string) string { return "path=" + url.QueryEscape(p) }

func TestWorkspaceList(t *testing.T) {
	f := newViewFixture(t)
	resp, body := f.get(t, contract.WorkspaceListPath, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("list: %d %s", resp.StatusCode, body)
	}
	l := decode[contract.WorkspaceListing](t, body)
	type row struct {
		Name, Kind, Target, TargetKind string
		Outside                        bool
		Size                           int64
	}
	var got []row
	for _, e := range l.Entries {
		if e.ModTime.IsZero() {
			t.Errorf("%s has no mtime", e.Name)
		}
		got = append(got, row{e.Name, e.Kind, e.Target, e.TargetKind, e.Outside, e.Size})
	}
	want := []row{
		{Name: ".hidden", Kind: "dir"},
		{Name: "src", Kind: "dir"},
		{Name: "big.txt", Kind: "file", Size: contract.MaxFileView + 1},
		{Name: "bin.dat", Kind: "file", Size: 9},
		{Name: "dangling", Kind: "symlink", Target: "nothing-here"},
		{Name: "fifo", Kind: "other"},
		{Name: "hardlink.txt", Kind: "file", Size: int64(len(secret))},
		{Name: "latin1.txt", Kind: "file", Size: 4},
		{Name: "loop-a", Kind: "symlink"},
		{Name: "loop-b", Kind: "symlink"},
		{Name: "main.go", Kind: "file", Size: 13},
		{Name: "odd name %2e.md", Kind: "file", Size: 6},
		{Name: "to-main", Kind: "symlink", Target: "main.go", TargetKind: "file"},
		{Name: "to-other", Kind: "symlink", Outside: true},
		{Name: "to-root", Kind: "symlink", Outside: true},
		{Name: "to-secret", Kind: "symlink", Outside: true},
		{Name: "to-secret-rel", Kind: "symlink", Outside: true},
		{Name: "to-src", Kind: "symlink", Target: "src", TargetKind: "dir"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("listing (-want +got):\n%s", diff)
	}
	if l.Path != "." || l.Truncated {
		t.Errorf("path %q truncated %v", l.Path, l.Truncated)
	}
	if strings.Contains(string(body), f.tw.dir) {
		t.Errorf("the listing names the worker's directories: %s", body)
	}

	// A subdirectory, and one reached through a symlink inside.
	for _, p := range []string{"src", "src/", "to-src"} {
		resp, body := f.get(t, contract.WorkspaceListPath, pathQuery(p))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("list %s: %d %s", p, resp.StatusCode, body)
		}
		if l := decode[contract.WorkspaceListing](t, body); len(l.Entries) != 2 || l.Entries[0].Name != "lib.go" || l.Entries[1].Name != "up" {
			t.Errorf("list %s: %+v", p, l.Entries)
		}
	}
}

func TestWorkspaceListBounded(t *testing.T) {
	f := newViewFixture(t)
	dir := filepath.Join(f.ws, "many")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range contract.MaxListEntries + 5 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	resp, body := f.get(t, contract.WorkspaceListPath, pathQuery("many"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	l := decode[contract.WorkspaceListing](t, body)
	if len(l.Entries) != contract.MaxListEntries || !l.Truncated || l.Entries[0].Name != "f0000" {
		t.Errorf("%d entries, truncated %v, first %q", len(l.Entries), l.Truncated, l.Entries[0].Name)
	}
}

func TestWorkspaceFile(t *testing.T) {
	f := newViewFixture(t)
	for p, want := range map[string]contract.WorkspaceFile{
		"main.go":         {Path: "main.go", Size: 13, Content: "package main\n"},
		"to-main":         {Path: "to-main", Size: 13, Content: "package main\n"},
		"src/up/main.go":  {Path: "src/up/main.go", Size: 13, Content: "package main\n"},
		"bin.dat":         {Path: "bin.dat", Size: 9, Binary: true, Data: []byte("\x00\x01\x02binary")},
		"latin1.txt":      {Path: "latin1.txt", Size: 4, Binary: true, Data: []byte("caf\xe9")},
		".hidden/conf":    {Path: ".hidden/conf", Size: 4, Content: "k=v\n"},
		"odd name %2e.md": {Path: "odd name %2e.md", Size: 6, Content: "# odd\n"},
	} {
		resp, body := f.get(t, contract.WorkspaceFilePath, pathQuery(p))
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d %s", p, resp.StatusCode, body)
			continue
		}
		got := decode[contract.WorkspaceFile](t, body)
		if got.ModTime.IsZero() {
			t.Errorf("%s: no mtime", p)
		}
		got.ModTime = want.ModTime
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", p, diff)
		}
	}
}

// TestWorkspaceBadPaths is every path the view must refuse, on each
// endpoint that takes one: traversal by "..", encoded dots, absolute
// paths, symlinks out (to a file, the root, another conversation), loops,
// hard links, FIFOs, and malformed parameters.
func TestWorkspaceBadPaths(t *testing.T) {
	f := newViewFixture(t)
	type want struct {
		status int
		code   string
	}
	bad := want{http.StatusBadRequest, contract.CodeBadRequest}
	outside := want{http.StatusForbidden, contract.CodeOutsideWorkspace}
	notFound := want{http.StatusNotFound, contract.CodeNotFound}
	notFile := want{http.StatusUnprocessableEntity, contract.CodeNotAFile}
	for q, w := range map[string]want{
		pathQuery(".."):                           bad,
		pathQuery("../secret.txt"):                bad,
		pathQuery("src/../../secret.txt"):         bad,
		pathQuery("../c2/theirs.txt"):             bad,
		"path=%2e%2e%2fsecret.txt":                bad,
		"path=%2E%2E/%2E%2E/secret.txt":           bad,
		"path=src%2f..%2f..%2fsecret.txt":         bad,
		pathQuery(f.outside):                      bad,
		pathQuery("/etc/passwd"):                  bad,
		pathQuery(filepath.Join(f.ws, "main.go")): bad,
		pathQuery(`..\secret.txt`):                bad,
		pathQuery("main.go\x00"):                  bad,
		"path=main.go%00.txt":                     bad,
		pathQuery("a//b"):                         bad,
		pathQuery("./main.go"):                    bad,
		pathQuery(strings.Repeat("a/", 2049)):     bad,
		"path=%ff%fe":                             bad,
		"path=main.go&path=src":                   bad,
		"path=main.go&other=1":                    bad,
		"name=main.go":                            bad,
		pathQuery("to-secret"):                    outside,
		pathQuery("to-secret-rel"):                outside,
		pathQuery("to-other/theirs.txt"):          outside,
		pathQuery("to-root/etc/passwd"):           outside,
		pathQuery("loop-a"):                       notFile,
		pathQuery("loop-a/x"):                     notFile,
		pathQuery("dangling"):                     notFound,
		pathQuery("missing.txt"):                  notFound,
		pathQuery("main.go/x"):                    notFound,
	} {
		for _, ep := range []string{contract.WorkspaceFilePath, contract.WorkspaceListPath} {
			resp, body := f.get(t, ep, q)
			wantError(t, resp, body, w.status, w.code)
			if t.Failed() {
				t.Fatalf("%s?%s: %d %s", ep, q, resp.StatusCode, body)
			}
		}
	}
	// What only the file endpoint refuses, and what only the list does.
	for q, w := range map[string]want{
		pathQuery("hardlink.txt"): notFile,
		pathQuery("fifo"):         notFile,
		pathQuery("src"):          notFile,
		pathQuery("big.txt"):      {http.StatusRequestEntityTooLarge, contract.CodeFileTooLarge},
	} {
		resp, body := f.get(t, contract.WorkspaceFilePath, q)
		wantError(t, resp, body, w.status, w.code)
	}
	resp, body := f.get(t, contract.WorkspaceFilePath, pathQuery("big.txt"))
	if !strings.Contains(string(body), strconv.Itoa(contract.MaxFileView+1)) {
		t.Errorf("too large without its size: %s", body)
	}
	resp, body = f.get(t, contract.WorkspaceListPath, pathQuery("main.go"))
	wantError(t, resp, body, http.StatusUnprocessableEntity, contract.CodeNotAFile)

	// Another conversation, an unknown one, a bad id, no signature, another method.
	f.conv = "nobody"
	resp, body = f.get(t, contract.WorkspaceFilePath, pathQuery("main.go"))
	wantError(t, resp, body, http.StatusNotFound, contract.CodeNotFound)
	f.conv = "bad.id"
	resp, body = f.get(t, contract.WorkspaceFilePath, pathQuery("main.go"))
	wantError(t, resp, body, http.StatusBadRequest, contract.CodeInvalidID)
	resp, err := http.Get(f.tw.srv.URL + "/v1/sessions/c1/workspace/file?path=main.go")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unsigned: %d", resp.StatusCode)
	}
	resp, body = f.tw.call(t, http.MethodPost, "/v1/sessions/c1/workspace/file?path=main.go", nil)
	wantError(t, resp, body, http.StatusMethodNotAllowed, contract.CodeMethodNotAllowed)
}

// TestWorkspaceSwapRace swaps a file of the workspace for a symlink to
// outside, and back, while the view reads it: the view resolves the path
// and then opens it through the workspace's root descriptor, so a swap
// between the two makes the read fail, never read outside.
func TestWorkspaceSwapRace(t *testing.T) {
	f := newViewFixture(t)
	inside := filepath.Join(f.ws, "swap")
	file, link := filepath.Join(f.ws, "swap.file"), filepath.Join(f.ws, "swap.link")
	if err := os.WriteFile(file, []byte("inside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.outside, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(file, inside); err != nil {
		t.Fatal(err)
	}
	os.Remove(file)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Renames swap the two atomically: "swap" is the file, then the
		// symlink, then the file again.
		spare := filepath.Join(f.ws, "swap.spare")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				os.Rename(inside, spare)
				os.Rename(link, inside)
			} else {
				os.Rename(inside, link)
				os.Rename(spare, inside)
			}
		}
	}()
	seen := map[int]int{}
	for range 300 {
		for _, ep := range []string{contract.WorkspaceFilePath, contract.WorkspaceListPath} {
			resp, _ := f.get(t, ep, pathQuery("swap")) // fails the test on the secret
			seen[resp.StatusCode]++
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("answers: %v", seen)
}

func TestWorkspaceDiff(t *testing.T) {
	f := newViewFixture(t)
	ws := f.workspace(t)
	run := func(tool tools.Tool, in any) {
		t.Helper()
		b, _ := json.Marshal(in)
		res, err := tool.Run(context.Background(), tools.Call{ID: "toolu_1", Input: b, Workspace: ws, StateDir: f.stateDir})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %s", tool.Name(), err, res.Output)
		}
	}
	lines := "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\n"
	if err := os.WriteFile(filepath.Join(f.ws, "notes.txt"), []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	run(&tools.Edit{}, tools.EditInput{FilePath: "notes.txt", OldString: "six\n", NewString: "SIX\nsix and a half\n"})
	run(&tools.Edit{}, tools.EditInput{FilePath: "notes.txt", OldString: "one\n", NewString: "ONE\n"})
	run(&tools.Write{}, tools.WriteInput{FilePath: "new/made.txt", Content: "a\nb\n"})
	run(&tools.Write{}, tools.WriteInput{FilePath: "gone.txt", Content: "x\n"})
	if err := os.Remove(filepath.Join(f.ws, "gone.txt")); err != nil {
		t.Fatal(err)
	}

	diff := func(p string) contract.WorkspaceDiff {
		t.Helper()
		resp, body := f.get(t, contract.WorkspaceDiffPath, pathQuery(p))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("diff %s: %d %s", p, resp.StatusCode, body)
		}
		return decode[contract.WorkspaceDiff](t, body)
	}
	c := func(o, n int, s string) contract.DiffLine {
		return contract.DiffLine{Kind: contract.DiffContext, OldLine: o, NewLine: n, Text: s}
	}
	add := func(n int, s string) contract.DiffLine {
		return contract.DiffLine{Kind: contract.DiffAdded, NewLine: n, Text: s}
	}
	del := func(o int, s string) contract.DiffLine {
		return contract.DiffLine{Kind: contract.DiffRemoved, OldLine: o, Text: s}
	}
	got := diff("notes.txt")
	// The two changes are 5 lines apart: one hunk, their context merged.
	want := contract.WorkspaceDiff{Path: "notes.txt", Context: 3}
	want.Hunks = []contract.DiffHunk{{OldStart: 1, OldLines: 8, NewStart: 1, NewLines: 9, Lines: []contract.DiffLine{
		del(1, "one"), add(1, "ONE"), c(2, 2, "two"), c(3, 3, "three"), c(4, 4, "four"), c(5, 5, "five"),
		del(6, "six"), add(6, "SIX"), add(7, "six and a half"), c(7, 8, "seven"), c(8, 9, "eight"),
	}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("notes.txt (-want +got):\n%s", d)
	}
	if got := diff("new/made.txt"); !got.Created || len(got.Hunks) != 1 || len(got.Hunks[0].Lines) != 2 || got.Hunks[0].Lines[1] != add(2, "b") {
		t.Errorf("created: %+v", got)
	}
	if got := diff("gone.txt"); !got.Created || !got.Deleted || len(got.Hunks) != 0 {
		t.Errorf("created then deleted: %+v", got)
	}
	resp, body := f.get(t, contract.WorkspaceDiffPath, pathQuery("main.go"))
	wantError(t, resp, body, http.StatusNotFound, contract.CodeNotFound)
	for _, p := range []string{"../secret.txt", "/etc/passwd"} {
		resp, body := f.get(t, contract.WorkspaceDiffPath, pathQuery(p))
		wantError(t, resp, body, http.StatusBadRequest, contract.CodeBadRequest)
	}
	resp, body = f.get(t, contract.WorkspaceDiffPath, pathQuery("to-secret"))
	wantError(t, resp, body, http.StatusForbidden, contract.CodeOutsideWorkspace)
}

func TestToolOutput(t *testing.T) {
	f := newViewFixture(t)
	dir := filepath.Join(f.stateDir, tools.SpillDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("line of output\n", contract.MaxToolOutputView/15+10)
	for name, content := range map[string]string{"toolu_small.txt": "all of it\n", "toolu_big.txt": big} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(f.outside, filepath.Join(dir, "toolu_link.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(f.outside, filepath.Join(dir, "toolu_hard.txt")); err != nil {
		t.Fatal(err)
	}
	resp, body := f.get(t, contract.ToolOutputPath, "name=toolu_small.txt")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if got := decode[contract.ToolOutput](t, body); got.Content != "all of it\n" || got.Size != 10 || got.Truncated {
		t.Errorf("small: %+v", got)
	}
	resp, body = f.get(t, contract.ToolOutputPath, "name=toolu_big.txt")
	if got := decode[contract.ToolOutput](t, body); len(got.Content) != contract.MaxToolOutputView || got.Size != int64(len(big)) || !got.Truncated {
		t.Errorf("big: %d bytes of %d, truncated %v", len(got.Content), got.Size, got.Truncated)
	}
	for q, w := range map[string]struct {
		status int
		code   string
	}{
		"name=toolu_link.txt":                {http.StatusUnprocessableEntity, contract.CodeNotAFile},
		"name=toolu_hard.txt":                {http.StatusUnprocessableEntity, contract.CodeNotAFile},
		"name=toolu_missing.txt":             {http.StatusNotFound, contract.CodeNotFound},
		"name=..%2Fsecret.txt":               {http.StatusBadRequest, contract.CodeBadRequest},
		"name=../../../secret.txt":           {http.StatusBadRequest, contract.CodeBadRequest},
		"name=%2e%2e.txt":                    {http.StatusBadRequest, contract.CodeBadRequest},
		"name=a%2Fb.txt":                     {http.StatusBadRequest, contract.CodeBadRequest},
		"name=toolu_small":                   {http.StatusBadRequest, contract.CodeBadRequest},
		"name=.txt":                          {http.StatusBadRequest, contract.CodeBadRequest},
		"name=toolu_small.TXT":               {http.StatusBadRequest, contract.CodeBadRequest},
		"name=" + url.QueryEscape(f.outside): {http.StatusBadRequest, contract.CodeBadRequest},
		"":                                   {http.StatusBadRequest, contract.CodeBadRequest},
		"path=toolu_small.txt":               {http.StatusBadRequest, contract.CodeBadRequest},
	} {
		resp, body := f.get(t, contract.ToolOutputPath, q)
		wantError(t, resp, body, w.status, w.code)
	}
	// Another conversation's outputs are its own.
	f.conv = "c2"
	resp, body = f.get(t, contract.ToolOutputPath, "name=toolu_small.txt")
	wantError(t, resp, body, http.StatusNotFound, contract.CodeNotFound)
}

// FuzzWorkspacePath sends any path to the file, list and diff endpoints
// of a workspace full of traps: the answer is one of the view's, in the
// error shape when it is not 200, and never holds what lies outside.
func FuzzWorkspacePath(f *testing.F) {
	for _, s := range []string{"main.go", "..", "../secret.txt", "%2e%2e", "/etc/passwd", "to-secret", "src/up/to-secret",
		"loop-a", "to-other/theirs.txt", "src/../main.go", "a\x00b", "\\..\\secret.txt", "to-root/", ".", "", "src//lib.go"} {
		f.Add(s)
	}
	// One fixture for every input: a worker per input would measure the
	// worker's start, not the view.
	fx := newViewFixture(f)
	handler := fx.tw.w.Handler()
	f.Fuzz(func(t *testing.T, p string) {
		for _, ep := range []string{contract.WorkspaceFilePath, contract.WorkspaceListPath, contract.WorkspaceDiffPath} {
			u := strings.Replace(ep, "{id}", fx.conv, 1) + "?" + pathQuery(p)
			req := fx.tw.request(t, context.Background(), http.MethodGet, u, nil)
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			body := rec.Body.String()
			if strings.Contains(body, secret) {
				t.Fatalf("%q: the secret: %s", p, body)
			}
			switch rec.Code {
			case http.StatusOK, http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound,
				http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
			default:
				t.Fatalf("%s %q: %d %s", ep, p, rec.Code, body)
			}
			if rec.Code != http.StatusOK {
				var e contract.Error
				if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code == "" {
					t.Fatalf("%q: not the error shape: %s", p, body)
				}
			}
		}
	})
}

// TestWorkspaceDiffTooLarge: a file rewritten whole, every byte of it one
// that JSON escapes in six, makes a diff larger than an answer may be:
// refused with a reason, not cut on the way.
func TestWorkspaceDiffTooLarge(t *testing.T) {
	f := newViewFixture(t)
	ws := f.workspace(t)
	line := strings.Repeat("<", 99) + "\n"
	old := strings.Repeat(line, contract.MaxFileView/len(line))
	if err := os.WriteFile(filepath.Join(f.ws, "page.html"), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(tools.WriteInput{FilePath: "page.html", Content: strings.ReplaceAll(old, "<", ">")})
	if res, err := (&tools.Write{}).Run(context.Background(), tools.Call{ID: "toolu_1", Input: b, Workspace: ws, StateDir: f.stateDir}); err != nil || res.IsError {
		t.Fatalf("%v %s", err, res.Output)
	}
	resp, body := f.get(t, contract.WorkspaceDiffPath, pathQuery("page.html"))
	wantError(t, resp, body, http.StatusRequestEntityTooLarge, contract.CodeFileTooLarge)

	// More lines than a diff shows.
	if err := os.WriteFile(filepath.Join(f.ws, "lines.txt"), []byte(strings.Repeat("x\n", contract.MaxDiffLines+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(tools.EditInput{FilePath: "lines.txt", OldString: "x\n", NewString: "y\n", ReplaceAll: true})
	if res, err := (&tools.Edit{}).Run(context.Background(), tools.Call{ID: "toolu_2", Input: b, Workspace: ws, StateDir: f.stateDir}); err != nil || res.IsError {
		t.Fatalf("%v %s", err, res.Output)
	}
	resp, body = f.get(t, contract.WorkspaceDiffPath, pathQuery("lines.txt"))
	if msg := string(body); !strings.Contains(msg, strconv.Itoa(contract.MaxDiffLines+1)+" lines") {
		t.Errorf("lines: %s", msg)
	}
	wantError(t, resp, body, http.StatusRequestEntityTooLarge, contract.CodeFileTooLarge)
}
