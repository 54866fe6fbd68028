package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/talkide/platform/"

// importGroup is a set of the module's packages, named by path; a package
// below a named one belongs to the same group (internal/store covers
// internal/store/sqlite). mayNotImport names the groups none of its
// packages may depend on, even indirectly.
type importGroup struct {
	name         string
	pkgs         []string
	mayNotImport []string
}

// importGroups puts every package of the module in exactly one group. The
// two sides of the seam meet only over HTTP (docs/architecture.md); what
// both use imports neither; the commands alone wire everything together.
var importGroups = []importGroup{
	{
		name: "worker-side",
		pkgs: []string{"internal/worker", "internal/harness", "internal/tools", "internal/sessionstore", "internal/replicaset", "internal/minting",
			"internal/localproxy", "internal/mcp", "internal/sandbox", "internal/egress", "internal/build", "internal/buildcache"},
		mayNotImport: []string{"control-plane-side", "client"},
	},
	{
		name: "control-plane-side",
		pkgs: []string{"internal/controlplane", "internal/gateway", "internal/store", "internal/provision", "internal/budget",
			"internal/metrics", "internal/auth", "internal/kubeprovision", "internal/webui"},
		mayNotImport: []string{"worker-side", "client"},
	},
	{
		// Used by both sides, by the commands or by tests: libraries that
		// know neither side.
		name: "neutral",
		pkgs: []string{"internal/contract", "internal/trust", "internal/tokenscheme", "internal/sse", "internal/httpapi",
			"internal/backoff", "internal/atomicfile", "internal/fakeclock", "internal/fdlimit",
			"internal/readiness", "internal/secretfile", "internal/kubetest",
			"internal/proxytest", "internal/lifecycle", "internal/secretenv", "internal/syncbuf", "internal/cli",
			"internal/defaults", "internal/linediff", "internal/slowbody", "internal/proctest", "internal/proctree",
			"internal/observe", "internal/telemetry", "internal/modelimage", "internal/goldenfile", "internal/poll",
			"internal/readloop", "internal/roundtrip", "internal/inflight", "internal/outpipe", "internal/bodyroom"},
		mayNotImport: []string{"worker-side", "control-plane-side", "client"},
	},
	{
		// The terminal client speaks the public API, like a browser.
		name:         "client",
		pkgs:         []string{"internal/chatclient"},
		mayNotImport: []string{"worker-side", "control-plane-side"},
	},
	{
		// A stand-in for the Anthropic API; who may import it is checked
		// apart (simulatorUsers).
		name:         "simulator",
		pkgs:         []string{"internal/anthropicsim"},
		mayNotImport: []string{"worker-side", "control-plane-side", "client"},
	},
	{
		// The roles are assembled from both sides' parts (internal/roles)
		// and started by the commands; the operators' commands
		// (internal/admincmd) work on both sides' stores.
		name: "commands",
		pkgs: []string{"cmd/talkide", "cmd/talkide-sandbox", "internal/roles", "internal/admincmd", "bench", "deploy", "e2e"},
	},
}

// simulatorUsers may import internal/anthropicsim (tests may too: go list's
// Deps leave test imports out); internal/admincmd only through
// internal/roles, whose store and provisioner set-up it shares.
var simulatorUsers = []string{"cmd/talkide", "internal/roles", "internal/admincmd", "bench"}

func under(pkg string, paths []string) bool {
	for _, p := range paths {
		if pkg == module+p || strings.HasPrefix(pkg, module+p+"/") {
			return true
		}
	}
	return false
}

// groupOf returns the groups pkg belongs to: exactly one, or the test
// fails.
func groupOf(pkg string) []string {
	var in []string
	for _, g := range importGroups {
		if under(pkg, g.pkgs) {
			in = append(in, g.name)
		}
	}
	return in
}

// This test reads the real import graph, transitively, and fails on a
// crossing, on a package that no group holds, and on a group that names a
// package that does not exist.
func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}:{{join .Deps " "}}`, "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, d, _ := strings.Cut(line, ":")
		deps[pkg] = strings.Fields(d)
	}
	if len(deps) < 20 {
		t.Fatalf("go list named only %d packages; the check would prove nothing", len(deps))
	}

	group := map[string]string{}
	for pkg := range deps {
		switch in := groupOf(pkg); len(in) {
		case 0:
			t.Errorf("%s is in no import group: add it to the pkgs of the group it belongs to in importGroups (cmd/talkide/imports_test.go), and to the layout in docs/architecture.md", pkg)
		case 1:
			group[pkg] = in[0]
		default:
			t.Errorf("%s is in more than one import group (%s): keep it in one in importGroups", pkg, strings.Join(in, ", "))
		}
	}
	for _, g := range importGroups {
		for _, p := range g.pkgs {
			found := false
			for pkg := range deps {
				if under(pkg, []string{p}) {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("import group %s names %s, which holds no package: remove it from importGroups", g.name, p)
			}
		}
	}

	forbidden := map[string][]string{}
	for _, g := range importGroups {
		forbidden[g.name] = g.mayNotImport
	}
	for name, others := range forbidden {
		for _, other := range others {
			if _, ok := forbidden[other]; !ok {
				t.Errorf("import group %s forbids %q, which is no group", name, other)
			}
		}
	}
	checked := 0
	for pkg, ds := range deps {
		for _, dep := range ds {
			if !strings.HasPrefix(dep, module) {
				continue
			}
			checked++
			if slices.Contains(forbidden[group[pkg]], group[dep]) {
				t.Errorf("%s %s imports %s %s", group[pkg], pkg, group[dep], dep)
			}
			if dep == module+"internal/anthropicsim" && !under(pkg, simulatorUsers) {
				t.Errorf("%s imports the simulator, which only tests, cmd/talkide and the bench/ drivers may", pkg)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d project imports seen; the check would prove nothing", checked)
	}
}
