package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// cpAdmin runs talkide admin in a control-plane pod, where its secrets
// file, database and settings are (docs/operations.md).
func (e *env) cpAdmin(t *testing.T, args ...string) string {
	t.Helper()
	return e.kubectl(t, append([]string{"-n", "talkide", "exec", "deployment/talkide-controlplane", "--", "/talkide", "admin"},
		append(args, "--data-dir", "/var/lib/talkide")...)...)
}

// TestTenantEnvAdded: an operator adds a tenant-env with talkide admin env
// add; the control-plane's own reconciler makes its namespace, RBAC,
// Secret, claim, worker Deployment, Service and NetworkPolicy, and the
// worker's pod passes its readiness probe (the volume takes a write, the
// token file is read, the control-plane answers) under the restricted Pod
// Security level with a read-only root file system. Deleting the env
// revokes its token and removes its namespace.
func TestTenantEnvAdded(t *testing.T) {
	e := clusterEnv(t)
	t.Parallel() // leaves acme/dev's worker running: see the package comment
	var b [3]byte
	rand.Read(b[:])
	env := "e2e" + hex.EncodeToString(b[:])
	ns := "acme-" + env
	start := time.Now()
	e.cpAdmin(t, "env", "add", "--tenant", "acme", "--env", env, "--worker-url", "http://placeholder:8080")
	defer func() {
		e.cpAdmin(t, "env", "delete", "--tenant", "acme", "--env", env)
		// The session volume's PersistentVolume is the cluster's to reuse.
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) { // polling the namespace's deletion
			if out := e.kubectl(t, "get", "namespaces", "-o", "name"); !strings.Contains(out, "namespace/"+ns+"\n") {
				break
			}
		}
		for _, pv := range strings.Fields(e.kubectl(t, "get", "pv", "-o", "jsonpath={range .items[?(@.spec.claimRef.namespace==\""+ns+"\")]}{.metadata.name} {end}")) {
			e.kubectl(t, "patch", "pv", pv, "--type=json", "-p", `[{"op":"remove","path":"/spec/claimRef"}]`)
		}
	}()
	for {
		out := e.kubectl(t, "-n", ns, "get", "deployments", "-o", "jsonpath={.items[*].status.availableReplicas}")
		if strings.TrimSpace(out) == "1" {
			break
		}
		if time.Since(start) > 4*time.Minute {
			t.Fatalf("the worker of %s is not available after 4 minutes:\n%s", ns, e.kubectl(t, "-n", ns, "get", "all,pvc,events"))
		}
		time.Sleep(250 * time.Millisecond) // polling the cluster for the reconciler's work
	}
	t.Logf("figure: tenant-env added to worker pod Ready: %s", time.Since(start).Round(100*time.Millisecond))
	objs := e.kubectl(t, "-n", ns, "get", "serviceaccount,role,rolebinding,secret,pvc,deployment,service,networkpolicy", "-l", "app.kubernetes.io/managed-by=talkide-control-plane", "-o", "name")
	for _, want := range []string{"serviceaccount/talkide-worker", "role.rbac.authorization.k8s.io/talkide-worker", "rolebinding.rbac.authorization.k8s.io/talkide-worker",
		"secret/talkide-worker-token", "persistentvolumeclaim/claude-sessions", "deployment.apps/talkide-worker", "service/talkide-worker", "networkpolicy.networking.k8s.io/talkide-worker"} {
		if !strings.Contains(objs, want+"\n") {
			t.Errorf("%s lacks %s:\n%s", ns, want, objs)
		}
	}
	if l := e.kubectl(t, "get", "namespace", ns, "-o", "jsonpath={.metadata.labels.pod-security\\.kubernetes\\.io/enforce}"); l != "restricted" {
		t.Errorf("%s enforces Pod Security %q", ns, l)
	}
}
