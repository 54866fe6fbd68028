package cluster

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// livePod is a worker pod of acme-dev that runs and is not terminating.
type livePod struct{ name, ip string }

// livePods lists acme-dev's worker pods that run and are not terminating:
// a pod being deleted still runs (its phase is Running) while it drains,
// then may end Succeeded, and a test that picked it would exec into, or
// kill, a pod that no longer serves.
func (e *env) livePods(t *testing.T) []livePod {
	t.Helper()
	out := e.kubectl(t, "-n", "acme-dev", "get", "pods", "-l", "app.kubernetes.io/name=talkide-worker",
		"--field-selector", "status.phase=Running",
		"-o", `jsonpath={range .items[*]}{.metadata.name} {.status.podIP} {.metadata.deletionTimestamp}{"\n"}{end}`)
	var pods []livePod
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 { // no address yet, or terminating, otherwise
			pods = append(pods, livePod{name: f[0], ip: f[1]})
		}
	}
	return pods
}

// workerPod returns the name of acme-dev's one live worker pod, waiting a
// minute for a pod that a previous test scaled away or replaced to go.
func (e *env) workerPod(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		pods := e.livePods(t)
		if len(pods) == 1 {
			return pods[0].name
		}
		if time.Now().After(deadline) {
			t.Fatalf("acme-dev has %d live worker pods %v, want one:\n%s", len(pods), pods, e.kubectl(t, "-n", "acme-dev", "get", "pods"))
		}
		time.Sleep(time.Second) // polling the pods
	}
}

// inWorker runs argv in the worker pod's container, as its user, and
// returns what it printed; the error is the command's.
func (e *env) inWorker(t *testing.T, pod string, timeout time.Duration, argv ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"-n", "acme-dev", "exec", pod, "-c", "worker", "--"}, argv...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestSandboxInTheWorkerPod runs internal/sandbox's own tests, the attack
// table among them, inside the worker's pod as the pod's user: the
// configuration production has (no user namespaces, no cgroup the worker
// may write, the RuntimeDefault seccomp profile around it all), with the
// image's talkide-sandbox as the helper, which must match the tree.
func TestSandboxInTheWorkerPod(t *testing.T) {
	e := clusterEnv(t)
	t.Parallel() // leaves acme/dev's worker running: see the package comment
	dir := t.TempDir()
	bin := filepath.Join(dir, "sandboxtest", "sandbox.test")
	// Static, and with -trimpath: built as scripts/images.sh builds the
	// images' binaries, so that it reuses what that build compiled.
	build := exec.Command("go", "test", "-c", "-trimpath", "-o", bin, "../../internal/sandbox")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go test -c: %v\n%s", err, out)
	}
	if out, err := exec.Command("cp", "-r", "../../internal/sandbox/testdata", filepath.Join(dir, "sandboxtest")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	pod := e.workerPod(t)
	e.kubectl(t, "-n", "acme-dev", "cp", "-c", "worker", filepath.Join(dir, "sandboxtest"), pod+":/tmp/sandboxtest")
	defer e.inWorker(t, pod, time.Minute, "rm", "-rf", "/tmp/sandboxtest")
	out, err := e.inWorker(t, pod, 10*time.Minute, "env", "TALKIDE_TEST_SANDBOX=landlock", "TALKIDE_TEST_SANDBOX_HELPER=/talkide-sandbox",
		"sh", "-c", "cd /tmp/sandboxtest && ./sandbox.test -test.v -test.count=1 -test.timeout=8m")
	if err != nil || !strings.Contains(out, "\nPASS\n") {
		t.Fatalf("internal/sandbox's tests in the worker pod: %v\n%s", err, out)
	}
	for _, name := range []string{"TestHidesEverythingElse", "TestSeccompRefuses", "TestSupervisorKilled", "TestInheritedDescriptorsStayOut", "TestHelperMustMatch"} {
		if !strings.Contains(out, "--- PASS: "+name+" ") {
			t.Errorf("%s did not pass in the worker pod:\n%s", name, out)
		}
	}
}

// TestWorkerRBAC: from inside the worker pod, with its ServiceAccount's
// token, the worker may create Jobs in its own namespace and follow their
// pods, and nothing else: not Secrets, not another namespace, not
// pods/exec. The API server answers each question itself
// (SelfSubjectAccessReview), and a real read of the Secrets is refused.
func TestWorkerRBAC(t *testing.T) {
	e := clusterEnv(t)
	t.Parallel() // leaves acme/dev's worker running: see the package comment
	pod := e.workerPod(t)
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount"
	curl := func(method, path, body string) string {
		t.Helper()
		script := `curl -sS --cacert ` + sa + `/ca.crt -H "Authorization: Bearer $(cat ` + sa + `/token)" -H 'Content-Type: application/json' -X ` +
			method + ` https://kubernetes.default.svc` + path
		if body != "" {
			script += ` --data-binary @-`
		}
		out, err := e.kubectlCmd(t.Context(), strings.NewReader(body), "-n", "acme-dev", "exec", "-i", pod, "-c", "worker", "--", "sh", "-c", script)
		if err != nil {
			t.Fatalf("curl %s %s in the worker pod: %v", method, path, err)
		}
		return out
	}
	can := func(ns, verb, resource, sub string) bool {
		t.Helper()
		group := ""
		if resource == "jobs" {
			group = "batch"
		}
		b, _ := json.Marshal(map[string]any{
			"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
			"spec": map[string]any{"resourceAttributes": map[string]string{"namespace": ns, "verb": verb, "group": group, "resource": resource, "subresource": sub}},
		})
		var r struct {
			Status struct {
				Allowed bool `json:"allowed"`
			} `json:"status"`
		}
		out := curl("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", string(b))
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("a SelfSubjectAccessReview: %v\n%s", err, out)
		}
		return r.Status.Allowed
	}
	for _, c := range []struct {
		ns, verb, resource, sub string
		want                    bool
	}{
		{"acme-dev", "create", "jobs", "", true},
		{"acme-dev", "delete", "jobs", "", true},
		{"acme-dev", "watch", "pods", "", true},
		{"acme-dev", "get", "pods", "log", true},
		{"acme-dev", "get", "secrets", "", false},
		{"acme-dev", "list", "secrets", "", false},
		{"acme-dev", "create", "pods", "exec", false},
		{"acme-dev", "create", "pods", "", false},
		{"acme-dev", "patch", "deployments", "", false},
		{"talkide", "create", "jobs", "", false},
		{"talkide", "get", "secrets", "", false},
		{"kube-system", "list", "pods", "", false},
	} {
		if got := can(c.ns, c.verb, c.resource, c.sub); got != c.want {
			t.Errorf("%s %s %s/%s in %s: allowed %v, want %v", "the worker", c.verb, c.resource, c.sub, c.ns, got, c.want)
		}
	}
	if out := curl("GET", "/api/v1/namespaces/acme-dev/secrets", ""); !strings.Contains(out, `"code": 403`) {
		t.Errorf("listing the Secrets: %s", out)
	}
}
