package tools

import (
	"os"
	"sync"
	"testing"

	"github.com/talkide/platform/internal/sandbox"
)

func TestMain(m *testing.M) {
	// Bash runs its commands through the sandbox, with this test binary as
	// the helper.
	sandbox.RunHelper()
	os.Exit(m.Run())
}

var (
	testSandboxOnce sync.Once
	testSandbox     *sandbox.Sandbox
)

// testJail is the sandbox of a test conversation in ws, as the worker
// would give it: the strongest this machine has.
func testJail(t testing.TB, ws *Workspace) *sandbox.Jail {
	t.Helper()
	testSandboxOnce.Do(func() {
		s, err := sandbox.New(nil)
		if err != nil {
			panic(err)
		}
		testSandbox = s
	})
	if err := testSandbox.Unavailable(); err != nil {
		t.Fatalf("no sandbox on this machine: %v", err)
	}
	return &sandbox.Jail{
		Sandbox:   testSandbox,
		Workspace: ws.Root(),
		Env:       []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + ws.Root(), "LANG=C.UTF-8", "TERM=dumb"},
	}
}
