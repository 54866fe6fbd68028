package build

import (
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
