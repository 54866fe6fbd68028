package egress

import (
	"os/exec"
	"strings"
	"testing"
)

// The proxy runs in the worker, which meets the control plane only over
// HTTP: like every worker-side package it must not import a control-plane
// one, directly or through another package. cmd/talkide's import test
// checks the packages it lists; this one holds for egress whatever that
// list says.
func TestImportsNoControlPlane(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/talkide/platform/"
	controlSide := []string{"internal/controlplane", "internal/gateway", "internal/store", "internal/provision", "internal/budget", "internal/metrics", "internal/anthropicsim"}
	deps := strings.Fields(string(out))
	for _, dep := range deps {
		for _, c := range controlSide {
			if dep == module+c || strings.HasPrefix(dep, module+c+"/") {
				t.Errorf("egress depends on %s, a control-plane package or the simulator", dep)
			}
		}
	}
	if len(deps) < 20 || !strings.Contains(string(out), module+"internal/egress") {
		t.Fatalf("go list saw %d packages, without egress itself; the check would prove nothing", len(deps))
	}
}
