package main

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/talkide/platform/"

// The two sides of the seam meet only over HTTP (docs/architecture.md): this test
// reads the real import graph, transitively, and fails on a crossing.
func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}:{{join .Deps " "}}`, "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	workerSide := []string{"internal/worker", "internal/harness", "internal/tools", "internal/toolpolicy", "internal/sessionstore", "internal/minting", "internal/localproxy", "internal/mcp", "internal/sandbox", "internal/egress"}
	controlSide := []string{"internal/controlplane", "internal/gateway", "internal/store", "internal/provision", "internal/budget", "internal/metrics"}
	neutral := []string{"internal/contract", "internal/trust", "internal/sse", "internal/httpapi", "internal/backoff"}
	in := func(pkg string, group []string) bool {
		for _, g := range group {
			if pkg == module+g || strings.HasPrefix(pkg, module+g+"/") {
				return true
			}
		}
		return false
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, deps, _ := strings.Cut(line, ":")
		for _, dep := range strings.Fields(deps) {
			if !strings.HasPrefix(dep, module) {
				continue
			}
			checked++
			switch {
			case in(pkg, workerSide) && in(dep, controlSide):
				t.Errorf("worker-side %s imports control-plane-side %s", pkg, dep)
			case in(pkg, controlSide) && in(dep, workerSide):
				t.Errorf("control-plane-side %s imports worker-side %s", pkg, dep)
			case in(pkg, neutral) && (in(dep, workerSide) || in(dep, controlSide)):
				t.Errorf("%s, which both sides use, imports %s", pkg, dep)
			case dep == module+"internal/anthropicsim" && pkg != module+"cmd/talkide" && !strings.HasPrefix(pkg, module+"bench/"):
				t.Errorf("%s imports the simulator, which only tests, cmd/talkide and the bench/ drivers may", pkg)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d project imports seen; the check would prove nothing", checked)
	}
}
