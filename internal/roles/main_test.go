package roles

import (
	"testing"

	"github.com/talkide/platform/internal/kubetest"
	"github.com/talkide/platform/internal/sandbox"
)

func TestMain(m *testing.M) {
	// The sandbox re-executes the test binary as its helper.
	sandbox.RunHelper()
	kubetest.Main(m)
}
