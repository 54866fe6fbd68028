package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
)

// TestIdentityTokenRotation: an operator rotates acme/dev's identity token
// (talkide admin token rotate, run in a control-plane pod as the operations
// guide says) while the user talks: the new token reaches the worker
// through the mounted Secret (the kubelet's ..data swap), the old one is
// refused after the grace, and a turn every second across all of it
// succeeds: not one mint fails.
func TestIdentityTokenRotation(t *testing.T) {
	e := clusterEnv(t)
	t.Parallel() // leaves acme/dev's worker running: see the package comment
	const grace = 60 * time.Second
	pod := e.workerPod(t)
	hash := func() string {
		out, err := e.inWorker(t, pod, time.Minute, "sha256sum", "/var/run/talkide/worker/identity-token")
		if err != nil {
			t.Fatalf("the worker's token file: %v %s", err, out)
		}
		return strings.Fields(out)[0]
	}
	before := hash()
	id := e.conversation(t)
	out := e.kubectl(t, "-n", "talkide", "exec", "deployment/talkide-controlplane", "--", "/talkide", "admin", "token", "rotate",
		"--tenant", "acme", "--env", "dev", "--grace", grace.String(), "--data-dir", "/var/lib/talkide")
	rotated := time.Now()
	t.Logf("rotated: %s", strings.TrimSpace(out))
	var swapped time.Duration
	turns := 0
	for time.Since(rotated) < grace+15*time.Second || swapped == 0 {
		if time.Since(rotated) > 5*time.Minute {
			t.Fatal("the new token never reached the worker's pod")
		}
		for _, ev := range e.turn(t, id, "a turn across the rotation") {
			if ev.Kind == contract.KindTurnFailed {
				t.Fatalf("a turn %s after the rotation failed: %+v", time.Since(rotated).Round(time.Second), ev.Failure)
			}
		}
		turns++
		if swapped == 0 && hash() != before {
			swapped = time.Since(rotated)
		}
		time.Sleep(time.Second)
	}
	t.Logf("figure: the rotated token reached the worker's pod after %s; %d turns across the rotation and the %s grace, none failed", swapped.Round(time.Second), turns, grace)
}
