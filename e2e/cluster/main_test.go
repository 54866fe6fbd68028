// Package cluster holds the end-to-end tests of the platform on a real
// single-node Kubernetes cluster (scripts/cluster.sh): each does what a
// user or an operator does, through the browser API and kubectl, and
// checks the result the same way.
//
// They need the variables `scripts/cluster.sh up` prints (KUBECONFIG,
// TALKIDE_NETNS, TALKIDE_URL, TALKIDE_TOKEN_FILE); scripts/test.sh brings
// the cluster up and sets them. Without them the tests fail, saying so;
// TALKIDE_CLUSTER=skip skips them. The cluster's addresses exist only in
// its network namespace: the test binary re-executes itself there.
//
// The tests that restart, kill or scale acme/dev's worker (the replicas,
// the pod killed mid-turn, the rollouts) run one after another. The rest
// leave that worker running and call t.Parallel: Go runs them together
// once the others are done. Most of their time is waiting (a namespace's
// deletion, a token's grace, a Job's pod), so together they take about
// as long as the longest of them alone: 434 s for the package against
// 507 s one after another, measured alone on two CPUs.
package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// reexecMarker tells the re-executed test binary that it runs in the
// cluster's network namespace already.
const reexecMarker = "TALKIDE_CLUSTER_REEXEC"

func TestMain(m *testing.M) {
	// After scripts/cluster.sh down the namespace is gone: the check that
	// nothing is left runs where it is started.
	if os.Getenv("TALKIDE_CLUSTER") != "skip" && os.Getenv(reexecMarker) == "" && os.Getenv("TALKIDE_CLUSTER_DOWN") != "1" {
		if ns := os.Getenv("TALKIDE_NETNS"); ns != "" && !inNetns(ns) {
			cmd := exec.Command("nsenter", append([]string{"--net=" + ns, "--", os.Args[0]}, os.Args[1:]...)...)
			cmd.Env = append(os.Environ(), reexecMarker+"=1")
			cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
			if err := cmd.Run(); err != nil {
				if ee, ok := err.(*exec.ExitError); ok {
					os.Exit(ee.ExitCode())
				}
				fmt.Fprintln(os.Stderr, "cluster tests: nsenter:", err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	os.Exit(m.Run())
}

// inNetns reports whether this process is in the network namespace at
// path.
func inNetns(path string) bool {
	var a, b syscall.Stat_t
	if syscall.Stat(path, &a) != nil || syscall.Stat("/proc/self/ns/net", &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}
