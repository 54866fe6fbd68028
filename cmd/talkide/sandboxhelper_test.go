package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A stale --sandbox-helper keeps the worker from starting, with the flag
// named in the error.
func TestSandboxHelperFlagMustMatch(t *testing.T) {
	stale := filepath.Join(t.TempDir(), "talkide-sandbox")
	os.WriteFile(stale, []byte("#!/bin/sh\necho stale\n"), 0o755)
	var out, errOut bytes.Buffer
	code := execute(t.Context(), []string{"sandbox", "check", "--sandbox-helper", stale}, stdio{in: strings.NewReader(""), out: &out, err: &errOut})
	if code == 0 || !strings.Contains(errOut.String(), "--sandbox-helper") || !strings.Contains(errOut.String(), "other code") {
		t.Fatalf("sandbox check with a stale helper: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	built := builtHelper(t)
	if code := execute(t.Context(), []string{"sandbox", "check", "--sandbox", "landlock", "--sandbox-helper", built}, stdio{in: strings.NewReader(""), out: &out, err: &errOut}); code != 0 || !strings.Contains(out.String(), "helper: "+built) || !strings.Contains(out.String(), "\ncpu: ") {
		t.Fatalf("sandbox check with talkide-sandbox: exit %d\n%s%s", code, out.String(), errOut.String())
	}
}

// builtHelper builds cmd/talkide-sandbox for the test.
func builtHelper(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "talkide-sandbox")
	goBuild(t, bin, "../talkide-sandbox")
	return bin
}
