package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRepositoryStandsAlone: the docs and comments give their reasons in
// their own words. A clone of this repository has no spec, design file or
// issue tracker beside it, so a reference to one is a dead end for its
// reader. Every file a person writes is read: Go, docs, scripts, the web
// UI's sources, manifests, migrations (not the generated UI bundle).
func TestRepositoryStandsAlone(t *testing.T) {
	refs := regexp.MustCompile(`\.\./shared|\bDESIGN(\.md)?\b|\bseed ?§|§ ?\d|(?i:\bissue #?\d+\b)|\bUC-\d+|\bADR-\d+`)
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "testdata", "dist":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".sh", ".ts", ".tsx", ".mjs", ".css", ".html", ".yaml", ".sql":
		default:
			if d.Name() != "Dockerfile" && !strings.HasPrefix(path, filepath.Join(root, ".ci")) {
				return nil
			}
		}
		if strings.HasSuffix(path, "standalone_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := refs.FindString(line); m != "" {
				t.Errorf("%s:%d refers to %q, which a clone does not have: %s", path, i+1, m, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
