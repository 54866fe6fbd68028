package tools

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// change calls a file tool with a state directory; it must succeed.
func change(t *testing.T, tool Tool, ws *Workspace, stateDir string, in any) {
	t.Helper()
	if res := runIn(t, tool, ws, stateDir, in); res.IsError {
		t.Fatalf("%s: %s", tool.Name(), res.Output)
	}
}

func TestOriginals(t *testing.T) {
	root := t.TempDir()
	state := t.TempDir()
	ws, err := NewWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	os.WriteFile(filepath.Join(root, "old.txt"), []byte("before\n"), 0o644)
	os.WriteFile(filepath.Join(root, "big.txt"), []byte(strings.Repeat("x", MaxOriginalBytes+1)), 0o644)
	os.WriteFile(filepath.Join(root, "untouched.txt"), []byte("same\n"), 0o644)
	symlink(t, "old.txt", filepath.Join(root, "alias.txt"))

	change(t, &Edit{}, ws, state, EditInput{FilePath: "old.txt", OldString: "before", NewString: "after"})
	// The second change keeps nothing: the original is the first one's.
	change(t, &Write{}, ws, state, WriteInput{FilePath: "alias.txt", Content: "third\n"})
	change(t, &Write{}, ws, state, WriteInput{FilePath: "dir/new.txt", Content: "fresh\n"})
	change(t, &Edit{}, ws, state, EditInput{FilePath: "big.txt", OldString: "xx", NewString: "y", ReplaceAll: true})
	// Without a state directory, nothing is kept and nothing fails.
	change(t, &Write{}, ws, "", WriteInput{FilePath: "unkept.txt", Content: "x"})

	for p, want := range map[string]Original{
		"old.txt":     {Existed: true, Data: []byte("before\n")},
		"alias.txt":   {Existed: true, Data: []byte("before\n")}, // the same file, by its real path
		"dir/new.txt": {},
		"big.txt":     {Existed: true, TooLarge: true},
	} {
		got, err := ws.Original(state, p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", p, d)
		}
	}
	for _, p := range []string{"untouched.txt", "unkept.txt", "missing.txt"} {
		if _, err := ws.Original(state, p); !errors.Is(err, ErrNoOriginal) {
			t.Errorf("%s: %v, want ErrNoOriginal", p, err)
		}
	}
	if _, err := ws.Original(state, "../x"); !errors.Is(err, ErrOutsideWorkspace) {
		t.Errorf("../x: %v", err)
	}
	// Records are files of the state directory, named by a hash, 0600 in a 0700 directory.
	entries, err := os.ReadDir(filepath.Join(state, OriginalsDir))
	if err != nil || len(entries) != 3 {
		t.Fatalf("%d records: %v", len(entries), err)
	}
	if fi, _ := os.Stat(filepath.Join(state, OriginalsDir)); fi.Mode().Perm() != 0o700 {
		t.Errorf("originals directory mode %v", fi.Mode().Perm())
	}
}

// TestOriginalsRace: many calls changing one file at once keep one
// original, the content before all of them.
func TestOriginalsRace(t *testing.T) {
	root, state := t.TempDir(), t.TempDir()
	ws, err := NewWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	os.WriteFile(filepath.Join(root, "f.txt"), []byte("original\n"), 0o644)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			(&Write{}).Run(context.Background(), Call{ID: "toolu_1", Input: input(t, WriteInput{FilePath: "f.txt", Content: strings.Repeat("w", i+1)}), Workspace: ws, StateDir: state})
		})
	}
	wg.Wait()
	got, err := ws.Original(state, "f.txt")
	if err != nil || string(got.Data) != "original\n" {
		t.Errorf("%q %v", got.Data, err)
	}
	entries, _ := os.ReadDir(filepath.Join(state, OriginalsDir))
	if len(entries) != 1 {
		t.Errorf("%d entries, want one record and no temporary file", len(entries))
	}
}
