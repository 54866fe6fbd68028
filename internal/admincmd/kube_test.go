package admincmd

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talkide/platform/internal/kubetest"
	"github.com/talkide/platform/internal/roles/rolestest"
)

// kubeEnv is a control-plane directory holding the tenant-env
// TENANT/prod, TENANT unique on the shared test API server (prefix and
// random hex), with the flags that name the directory and the server.
func kubeEnv(t *testing.T, prefix string) (srv *kubetest.Server, tenant, ns, dataDirFlag, kubeconfigFlag string) {
	t.Helper()
	srv = kubetest.Start(t)
	dir, _ := rolestest.NewControlPlaneDir(t)
	var b [3]byte
	rand.Read(b[:])
	tenant = prefix + hex.EncodeToString(b[:])
	dataDirFlag = "--data-dir=" + dir
	mustAdmin(t, "env", "add", dataDirFlag, "--worker-url", "http://placeholder:8080", "--tenant", tenant, "--env", "prod")
	return srv, tenant, tenant + "-prod", dataDirFlag, "--kubeconfig=" + kubetest.Kubeconfig(t, srv.Config(), "")
}

// The admin commands drive the provisioner: sync creates and then keeps,
// status shows, rotate rotates, delete revokes and deletes.
func TestAdminKubernetes(t *testing.T) {
	srv, tenant, ns, d, kc := kubeEnv(t, "k")
	// The same object flags on every call, as the control-plane's
	// environment gives them: a claim's class cannot change.
	te := []string{"--tenant", tenant, "--env", "prod", "--sessions-storage-class", "nfs",
		"--worker-cpu-request", "100m", "--worker-memory-request", "128Mi"}

	for _, bad := range [][]string{
		{"--worker-cpu-request", "3"}, // over the default limit, 2
		{"--worker-memory-request", "lots"},
		{"--worker-memory-limit", "0"},
		{"--worker-cpu-limit", "-1"},
	} {
		_, _, err := admin(t, append([]string{"env", "sync", d, kc, "--tenant", tenant, "--env", "prod"}, bad...)...)
		if err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("env sync %v: %v, want a refusal naming the flag", bad, err)
		}
	}
	out, _ := mustAdmin(t, append([]string{"env", "sync", d, kc}, te...)...)
	dep, err := srv.Client(t).AppsV1().Deployments(ns).Get(t.Context(), "talkide-worker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := dep.Spec.Template.Spec.Containers[0].Resources; r.Requests.Cpu().String() != "100m" || r.Requests.Memory().String() != "128Mi" || r.Limits.Cpu().String() != "2" {
		t.Errorf("the worker's resources: %+v", r)
	}
	for _, want := range []string{"Namespace", ns + "/talkide-worker", "created", "identity token"} {
		if !strings.Contains(out, want) {
			t.Errorf("first sync printed no %q:\n%s", want, out)
		}
	}
	out, _ = mustAdmin(t, append([]string{"env", "sync", d, kc}, te...)...)
	if !strings.Contains(out, "nothing changed") || strings.Contains(out, "created") {
		t.Errorf("second sync:\n%s", out)
	}
	out, _ = mustAdmin(t, append([]string{"env", "status", d, kc}, te...)...)
	if !strings.Contains(out, "Deployment") || !strings.Contains(out, "worker ready: false") {
		t.Errorf("status:\n%s", out)
	}
	out, _ = mustAdmin(t, append([]string{"token", "rotate", d, kc, "--grace", "1m"}, te...)...)
	if !strings.Contains(out, "stays valid until") {
		t.Errorf("rotate:\n%s", out)
	}
	if _, _, err := admin(t, append([]string{"token", "rotate", d, kc, "--grace", "-1m"}, te...)...); err == nil {
		t.Error("a negative grace was accepted")
	}
	if _, _, err := admin(t, "env", "sync", d, kc, "--tenant", "../x", "--env", "prod"); err == nil {
		t.Error("a bad tenant name was accepted")
	}
	out, _ = mustAdmin(t, append([]string{"env", "delete", d, kc, "--keep-sessions"}, te...)...)
	if !strings.Contains(out, "revoked 2 identity token(s)") || !strings.Contains(out, "kept namespace") {
		t.Errorf("delete --keep-sessions:\n%s", out)
	}
	if _, err := srv.Client(t).CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "claude-sessions", metav1.GetOptions{}); err != nil {
		t.Errorf("the claim is gone: %v", err)
	}
	if _, _, err := admin(t, append([]string{"env", "sync", d, kc}, te...)...); err == nil || !strings.Contains(err.Error(), "retired") {
		t.Errorf("sync of a retired env: %v", err)
	}
}

// talkide admin env scale sets a fixed count or an autoscaled range and
// syncs at once; env status shows the replicas and the autoscaler; bad
// values are refused, each with a message naming the flag, before
// anything changes.
func TestAdminEnvScale(t *testing.T) {
	srv, tenant, ns, d, kc := kubeEnv(t, "s")
	class := "--sessions-storage-class=nfs"
	cs := srv.Client(t)
	ctx := t.Context()
	replicas := func() int32 {
		t.Helper()
		dep, err := cs.AppsV1().Deployments(ns).Get(ctx, "talkide-worker", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return *dep.Spec.Replicas
	}
	hpaExists := func() bool {
		t.Helper()
		_, err := cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, "talkide-worker", metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}

	// Fixed, the tenant-env as arguments.
	out, _ := mustAdmin(t, "env", "scale", tenant, "prod", d, kc, class, "--replicas", "3")
	for _, want := range []string{"Deployment", "created", "scale 1 replica(s) (fixed) -> 3 replica(s) (fixed)"} {
		if !strings.Contains(out, want) {
			t.Errorf("scale --replicas 3 printed no %q:\n%s", want, out)
		}
	}
	if got := replicas(); got != 3 || hpaExists() {
		t.Errorf("after --replicas 3: %d replicas, autoscaler %v", got, hpaExists())
	}

	// Autoscaled, the tenant-env as flags.
	out, _ = mustAdmin(t, "env", "scale", d, kc, class, "--tenant", tenant, "--env", "prod", "--min", "2", "--max", "5", "--turns-per-replica", "4")
	for _, want := range []string{"HorizontalPodAutoscaler", "-> 2-5 replicas (autoscaled at 4 running turns per replica)", "talkide_worker_turns_running"} {
		if !strings.Contains(out, want) {
			t.Errorf("scale --min 2 --max 5 printed no %q:\n%s", want, out)
		}
	}
	h, err := cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, "talkide-worker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *h.Spec.MinReplicas != 2 || h.Spec.MaxReplicas != 5 || h.Spec.Metrics[0].Pods.Target.AverageValue.Value() != 4 {
		t.Errorf("autoscaler spec %+v", h.Spec)
	}
	if got := replicas(); got != 3 {
		t.Errorf("the 3 replicas within 2-5 became %d", got)
	}
	out, _ = mustAdmin(t, "env", "status", tenant, "prod", d, kc, class)
	for _, want := range []string{"replicas: 3 desired, 0 ready; scale: 2-5 replicas", "autoscaler: 2-5 replicas", "PodDisruptionBudget"} {
		if !strings.Contains(out, want) {
			t.Errorf("status printed no %q:\n%s", want, out)
		}
	}

	bad := map[string]struct {
		args []string
		want string
	}{
		"no count":               {nil, "give --replicas N"},
		"min alone":              {[]string{"--min", "2"}, "both --min A and --max B"},
		"replicas 0":             {[]string{"--replicas", "0"}, "--replicas 0: want a whole number from 1 to 50"},
		"replicas over the cap":  {[]string{"--replicas", "51"}, "--replicas 51: want a whole number from 1 to 50"},
		"negative replicas":      {[]string{"--replicas=-2"}, "--replicas -2"},
		"replicas not a number":  {[]string{"--replicas", "three"}, "--replicas"},
		"min 0":                  {[]string{"--min", "0", "--max", "3"}, "--min 0: want"},
		"max over the cap":       {[]string{"--min", "1", "--max", "60"}, "--max 60: want a whole number from 1 to 50"},
		"min above max":          {[]string{"--min", "4", "--max", "3"}, "--min 4 is above --max 3"},
		"turns 0":                {[]string{"--min", "1", "--max", "3", "--turns-per-replica", "0"}, "--turns-per-replica 0: want a whole number from 1 to 1000"},
		"both forms":             {[]string{"--replicas", "2", "--min", "1", "--max", "3"}, "give one or the other"},
		"turns with a fixed one": {[]string{"--replicas", "2", "--turns-per-replica", "4"}, "give one or the other"},
	}
	for name, tt := range bad {
		t.Run(name, func(t *testing.T) {
			_, _, err := admin(t, append([]string{"env", "scale", tenant, "prod", d, kc, class}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("scale %v: error %v, want one naming %q", tt.args, err, tt.want)
			}
		})
	}
	for name, args := range map[string][]string{
		"one argument":        {"env", "scale", tenant, d, kc, "--replicas", "2"},
		"arguments and flags": {"env", "scale", tenant, "prod", "--tenant", "other", d, kc, "--replicas", "2"},
		"a bad tenant":        {"env", "scale", "../x", "prod", d, kc, "--replicas", "2"},
		"an unknown env":      {"env", "scale", tenant, "nope", d, kc, class, "--replicas", "2"},
	} {
		if _, _, err := admin(t, args...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if got := replicas(); got != 3 || !hpaExists() {
		t.Errorf("after the refused commands: %d replicas, autoscaler %v; want 3 and one", got, hpaExists())
	}

	// Back to a fixed count: the autoscaler goes.
	out, _ = mustAdmin(t, "env", "scale", tenant, "prod", d, kc, class, "--replicas", "2")
	if !strings.Contains(out, "HorizontalPodAutoscaler") || !strings.Contains(out, "deleted") || replicas() != 2 || hpaExists() {
		t.Errorf("scale back to --replicas 2 (%d replicas, autoscaler %v):\n%s", replicas(), hpaExists(), out)
	}
	out, _ = mustAdmin(t, "env", "scale", tenant, "prod", d, kc, class, "--replicas", "2")
	if !strings.Contains(out, "scale unchanged, 2 replica(s) (fixed)") {
		t.Errorf("the same scale again:\n%s", out)
	}

	// A retired env is refused.
	mustAdmin(t, "env", "delete", tenant, "prod", d, kc, class, "--keep-sessions")
	if _, _, err := admin(t, "env", "scale", tenant, "prod", d, kc, class, "--replicas", "4"); err == nil || !strings.Contains(err.Error(), "retired") {
		t.Errorf("scale of a retired env: %v", err)
	}
}
