package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// raceOps is how many calls of each tool race the swapper.
const raceOps = 1000

// swapTree is a workspace whose directory "sw" a goroutine keeps swapping,
// with renameat2(RENAME_EXCHANGE), for "swlink", a symlink to a directory
// outside — what a background process started by Bash could do while Mara
// works. Whatever its name at a given moment, the real directory stays
// inside; the outside directory holds files of the same names with other
// content, and one of its own.
type swapTree struct {
	ws      *Workspace
	outside string
	before  map[string]string // the outside directory's files and contents
}

// insideFiles are the files of the swapped directory.
var insideFiles = map[string]string{"r.txt": "inside\n", "g.go": "package inside\n"}

func newSwapTree(t *testing.T, edits int) *swapTree {
	t.Helper()
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	outside := filepath.Join(parent, "outside")
	inside := map[string]string{}
	before := map[string]string{"outside-only.txt": "OUTSIDE\n"}
	for name, content := range insideFiles {
		inside[filepath.Join("sw", name)] = content
		before[name] = "OUTSIDE " + content
	}
	for i := range edits {
		// The same text inside and out: an Edit that got out would succeed.
		inside[fmt.Sprintf("sw/e%04d.txt", i)] = "inside\n"
		before[fmt.Sprintf("e%04d.txt", i)] = "inside\n"
	}
	writeFiles(t, root, inside)
	writeFiles(t, outside, before)
	symlink(t, outside, filepath.Join(root, "swlink"))
	ws, err := NewWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	return &swapTree{ws: ws, outside: outside, before: before}
}

// swap starts the swapper and returns the function that stops it, which
// the test calls before it looks at the result; it reports how many swaps
// were made.
func (s *swapTree) swap(t *testing.T) (stop func() int) {
	t.Helper()
	a, b := filepath.Join(s.ws.Root(), "sw"), filepath.Join(s.ws.Root(), "swlink")
	done := make(chan struct{})
	var wg sync.WaitGroup
	var swaps int
	var swapErr error
	wg.Go(func() { // owned by the test: stop ends it
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
				swapErr = err
				return
			}
			swaps++
		}
	})
	var once sync.Once
	stop = func() int {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
		if swapErr != nil {
			t.Fatalf("renameat2(RENAME_EXCHANGE): %v", swapErr)
		}
		return swaps
	}
	t.Cleanup(func() { stop() })
	return stop
}

// checkOutside fails the test unless the outside directory holds exactly
// what it held before.
func (s *swapTree) checkOutside(t *testing.T) {
	t.Helper()
	entries, err := os.ReadDir(s.outside)
	if err != nil {
		t.Fatal(err)
	}
	var names, want []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	for name := range s.before {
		want = append(want, name)
	}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("the outside directory holds %d files, want %d; new: %v", len(names), len(want), newNames(names, s.before))
	}
	for name, content := range s.before {
		if got := readFile(t, s.outside, name); got != content {
			t.Errorf("outside %s = %q, want %q", name, got, content)
		}
	}
}

func newNames(names []string, before map[string]string) []string {
	var out []string
	for _, n := range names {
		if _, ok := before[n]; !ok {
			out = append(out, n)
		}
	}
	return out
}

// realDir returns the path of the swapped directory now, whichever name it
// has (the swapper is stopped).
func (s *swapTree) realDir(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"sw", "swlink"} {
		p := filepath.Join(s.ws.Root(), name)
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			return p
		}
	}
	t.Fatal("the swapped directory is gone")
	return ""
}

// refusals are the errors a call may end with when the swap catches it:
// the path led outside (seen by Resolve or by the kernel walk from the root
// descriptor), or a component changed kind under the walk.
var refusals = []string{
	"path is outside the workspace",
	"does not exist",
	"no such file or directory",
	"not a directory",
	"too many levels of symbolic links",
}

// outcome sorts one result: ok, or refused for one of refusals; anything
// else fails the test.
func outcome(t *testing.T, i int, res Result, ok func(string) bool, counts map[string]int) {
	t.Helper()
	if !res.IsError {
		if !ok(res.Output) {
			t.Fatalf("call %d succeeded with %q", i, res.Output)
		}
		counts["ok"]++
		return
	}
	for _, r := range refusals {
		if strings.Contains(res.Output, r) {
			counts[r]++
			return
		}
	}
	t.Fatalf("call %d failed with an unexpected error: %q", i, res.Output)
}

// noOutside reports whether a listing or search result shows nothing of the
// outside directory.
func noOutside(out string) bool {
	return !strings.Contains(out, "OUTSIDE") && !strings.Contains(out, "outside-only")
}

// TestConfinementRace runs each file tool through a directory that is being
// swapped for a symlink to outside: no call ever writes, edits, reads or
// lists anything outside. Each call either works inside or is refused.
func TestConfinementRace(t *testing.T) {
	t.Run("Write", func(t *testing.T) {
		s := newSwapTree(t, 0)
		stop := s.swap(t)
		counts := map[string]int{}
		for i := range raceOps {
			name := fmt.Sprintf("w%04d.txt", i)
			res := run(t, &Write{}, s.ws, map[string]any{"file_path": "sw/" + name, "content": "written\n"})
			outcome(t, i, res, func(out string) bool { return strings.HasPrefix(out, "Created sw/"+name) }, counts)
		}
		t.Logf("%d swaps; outcomes %v", stop(), counts)
		s.checkOutside(t)
		written := 0
		entries, err := os.ReadDir(s.realDir(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "w") {
				written++
			}
		}
		if written != counts["ok"] {
			t.Errorf("%d files written inside, %d Writes succeeded", written, counts["ok"])
		}
		assertNoTempFiles(t, s.ws.Root())
	})
	t.Run("Edit", func(t *testing.T) {
		s := newSwapTree(t, raceOps)
		stop := s.swap(t)
		counts := map[string]int{}
		for i := range raceOps {
			res := run(t, &Edit{}, s.ws, map[string]any{"file_path": fmt.Sprintf("sw/e%04d.txt", i), "old_string": "inside", "new_string": "edited"})
			outcome(t, i, res, func(out string) bool { return strings.Contains(out, "replaced 1 occurrence") && noOutside(out) }, counts)
		}
		t.Logf("%d swaps; outcomes %v", stop(), counts)
		s.checkOutside(t)
		assertNoTempFiles(t, s.ws.Root())
	})
	t.Run("Read", func(t *testing.T) {
		s := newSwapTree(t, 0)
		stop := s.swap(t)
		counts := map[string]int{}
		for i := range raceOps {
			res := run(t, &Read{}, s.ws, map[string]any{"file_path": "sw/r.txt"})
			outcome(t, i, res, func(out string) bool { return out == "     1\tinside\n" }, counts)
		}
		t.Logf("%d swaps; outcomes %v", stop(), counts)
	})
	walkers := map[string]struct {
		tool Tool
		in   func(dir string) map[string]any
	}{
		"Glob": {&Glob{}, func(dir string) map[string]any { return map[string]any{"pattern": "**/*", "path": dir} }},
		"Grep": {&Grep{}, func(dir string) map[string]any {
			return map[string]any{"pattern": "inside|OUTSIDE", "path": dir, "output_mode": "content"}
		}},
		"LS": {&LS{}, func(dir string) map[string]any { return map[string]any{"path": dir} }},
	}
	for name, w := range walkers {
		t.Run(name, func(t *testing.T) {
			s := newSwapTree(t, 0)
			stop := s.swap(t)
			counts := map[string]int{}
			for i := range raceOps {
				// Through the swapped directory, and from the root, which
				// lists it mid-swap.
				dir := []string{"sw", "."}[i%2]
				res := run(t, w.tool, s.ws, w.in(dir))
				outcome(t, i, res, noOutside, counts)
				if res.IsError && dir == "." {
					t.Fatalf("call %d from the root failed: %q", i, res.Output)
				}
			}
			t.Logf("%d swaps; outcomes %v", stop(), counts)
		})
	}
}
