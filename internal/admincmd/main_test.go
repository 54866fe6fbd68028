package admincmd

import (
	"testing"

	"github.com/talkide/platform/internal/kubetest"
)

// The Kubernetes commands run against a real kube-apiserver, stopped after
// the tests.
func TestMain(m *testing.M) { kubetest.Main(m) }
