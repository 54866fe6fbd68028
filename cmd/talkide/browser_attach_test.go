package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestBrowserAttach: a text file and a PNG chosen with the composer's
// paperclip become chips, are uploaded with the message and shown as
// chips in its bubble; the simulated model says it saw the image; the
// files are in the workspace (and the Files panel) under attachments/; a
// file over the limit is refused in the page (web/test/attach.mjs).
func TestBrowserAttach(t *testing.T) {
	browserParallel(t)
	st, _ := startTestStack(t)
	runScenario(t, st, "attach", noSteps(t))
	matches, err := filepath.Glob(filepath.Join(st.Info.Workspaces, "*", "attachments", "pixel.png"))
	if err != nil || len(matches) != 2 {
		t.Fatalf("pixel.png in %d workspaces, want 2 (%v)", len(matches), err)
	}
	for _, m := range matches {
		if data, err := os.ReadFile(m); err != nil || len(data) != 70 {
			t.Errorf("%s: %d bytes, %v", m, len(data), err)
		}
	}
}
