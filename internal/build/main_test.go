package build

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/talkide/platform/internal/kubetest"
	"github.com/talkide/platform/internal/sandbox"
)

// The test binary is the sandbox's helper (the local runner's builds) and
// shares one API server among the Kubernetes runner's tests.
func TestMain(m *testing.M) {
	sandbox.RunHelper()
	kubetest.Main(m)
}

// fakeGradleWorkspace is a workspace whose ./gradlew is the stand-in in
// testdata/fakegradle.
func fakeGradleWorkspace(t testing.TB) string {
	t.Helper()
	ws := t.TempDir()
	b, err := os.ReadFile("testdata/fakegradle/gradlew")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, GradleWrapper), b, 0o755); err != nil {
		t.Fatal(err)
	}
	return ws
}
