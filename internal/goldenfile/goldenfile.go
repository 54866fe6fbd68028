// Package goldenfile compares what a test produced with a golden file that
// holds what it should produce, and rewrites the file instead when the test
// runs with its package's -update flag.
package goldenfile

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Check compares got with the file at path, after writing got to it when
// update is set; what names got in the failure.
func Check(t testing.TB, path string, got []byte, update bool, what string) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}
