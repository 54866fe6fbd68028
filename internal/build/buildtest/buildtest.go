// Package buildtest holds a stand-in for a Gradle wrapper (the script
// gradlew beside this file), for the tests of whatever runs builds: the
// runners, the Build tool, its MCP form and the stacks of cmd/talkide.
package buildtest

import (
	_ "embed"
	"os"
	"path/filepath"
	"testing"
)

//go:embed gradlew
var gradlew []byte

// Workspace is a new temporary workspace holding the stand-in as ./gradlew.
func Workspace(t testing.TB) string {
	t.Helper()
	ws := t.TempDir()
	FakeGradle(t, ws)
	return ws
}

// FakeGradle writes the stand-in as dir/gradlew, executable, creating dir
// if it is missing.
func FakeGradle(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gradlew"), gradlew, 0o755); err != nil {
		t.Fatal(err)
	}
}
