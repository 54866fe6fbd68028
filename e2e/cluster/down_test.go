package cluster

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDownLeftNothing: after scripts/cluster.sh down, nothing of the
// cluster is left: no process, mount, network namespace, cgroup, iptables
// rule or file. scripts/test.sh runs it after down, with
// TALKIDE_CLUSTER_DOWN=1; with a cluster up it has nothing to check.
func TestDownLeftNothing(t *testing.T) {
	if os.Getenv("TALKIDE_CLUSTER_DOWN") != "1" {
		t.Skip("run by scripts/test.sh after scripts/cluster.sh down (TALKIDE_CLUSTER_DOWN=1)")
	}
	dir := os.Getenv("TALKIDE_CLUSTER_DIR")
	if dir == "" {
		dir = "/var/lib/talkide-cluster"
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("%s is still there", dir)
	}
	if _, err := os.Stat("/run/containerd/s"); err == nil {
		t.Error("the shims' sockets (/run/containerd/s) are still there")
	}
	if ents, _ := os.ReadDir("/var/run/netns"); len(ents) > 0 {
		for _, e := range ents {
			if e.Name() == "talkide-cluster" || strings.HasPrefix(e.Name(), "cni-") {
				t.Errorf("network namespace %s is still there", e.Name())
			}
		}
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && (strings.HasPrefix(fields[4], dir) || strings.HasPrefix(fields[4], "/run/netns/cni-")) {
			t.Errorf("mount %s is still there", fields[4])
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cmd, dir) || strings.Contains(cmd, "containerd-shim") {
			t.Errorf("process %s is still running: %s", filepath.Base(filepath.Dir(p)), cmd)
		}
	}
	if cgs, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods*"); len(cgs) > 0 {
		t.Errorf("the pods' cgroups are still there: %v", cgs)
	}
	if out, err := exec.Command("iptables-save").Output(); err == nil && strings.Contains(string(out), "KUBE-") {
		t.Error("kube-proxy's iptables rules are in the host's namespace")
	}
}
