package tools

import (
	"testing"

	"github.com/talkide/platform/internal/sandbox"
	"github.com/talkide/platform/internal/sandbox/sandboxtest"
)

// Bash runs its commands through the sandbox, with this test binary as
// the helper.
func TestMain(m *testing.M) { sandboxtest.Main(m) }

// testJail is the sandbox of a test conversation in ws.
func testJail(t testing.TB, ws *Workspace) *sandbox.Jail { return sandboxtest.Jail(t, ws.Root()) }
