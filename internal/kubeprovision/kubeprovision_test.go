package kubeprovision

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/fakeclock"
	"github.com/talkide/platform/internal/kubetest"
	"github.com/talkide/platform/internal/provision"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/sqlite"
	"github.com/talkide/platform/internal/store/storetest"
	"github.com/talkide/platform/internal/trust"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

var commandSecret = bytes.Repeat([]byte{9}, 32)

type fixture struct {
	srv         *kubetest.Server
	st          store.Store
	clk         *fakeclock.Clock
	tenant, env string
	ns          string
}

// newFixture makes a store holding one env with a tenant name unique on
// the shared API server.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	srv := kubetest.Start(t)
	st := storetest.Open(t, sqlite.Open, ":memory:")
	var b [3]byte
	rand.Read(b[:])
	f := &fixture{srv: srv, st: st, clk: fakeclock.New(time.Now().UTC().Truncate(time.Millisecond)), tenant: "t" + hex.EncodeToString(b[:]), env: "prod"}
	f.ns = provision.Namespace(f.tenant, f.env)
	if _, err := provision.EnsureEnv(t.Context(), st, f.tenant, f.env, ""); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) provisioner(cs kubernetes.Interface, o *Options) *Provisioner {
	var opts Options
	if o != nil {
		opts = *o
	}
	opts.Now = f.clk.Now
	if opts.Image == "" {
		opts.Image = "registry.example/talkide:test"
	}
	if opts.StorageClass == "" {
		opts.StorageClass = "nfs-rwx"
	}
	return New(cs, f.st, commandSecret, "c1", &opts)
}

// shippedRules reads the ClusterRole deploy/ ships for the control-plane.
func shippedRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "base", "clusterrole.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cr rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(b, &cr); err != nil {
		t.Fatal(err)
	}
	if cr.Kind != "ClusterRole" || len(cr.Rules) == 0 {
		t.Fatalf("deploy/base/clusterrole.yaml holds %s with %d rules", cr.Kind, len(cr.Rules))
	}
	return cr.Rules
}

// shippedClient is a client for a user holding exactly the shipped
// ClusterRole, as the control-plane's ServiceAccount does.
func shippedClient(t *testing.T, srv *kubetest.Server) kubernetes.Interface {
	u := srv.User(t, &kubetest.UserOptions{Name: "talkide-controlplane", Rules: shippedRules(t)})
	return kubetest.NewClient(t, u.Config)
}

// sync syncs f's tenant-env with p; an error fails the test.
func (f *fixture) sync(t *testing.T, p *Provisioner) Result {
	t.Helper()
	res, err := p.Sync(t.Context(), f.tenant, f.env, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func actions(r Result) map[string]Action {
	m := map[string]Action{}
	for _, c := range r.Changes {
		m[c.Kind] = c.Action
	}
	return m
}

var kinds = []string{"Namespace", "ServiceAccount", "Role", "RoleBinding", "Secret", "PersistentVolumeClaim", "Deployment", "PodDisruptionBudget", "Service", "NetworkPolicy"}

// all is a as the action on every object of an env at a fixed count,
// which has no autoscaler.
func all(a Action) map[string]Action {
	m := map[string]Action{"HorizontalPodAutoscaler": Absent}
	for _, k := range kinds {
		m[k] = a
	}
	return m
}

// Sync creates every object with the spec the worker needs, as a user
// holding only the shipped ClusterRole; a second sync changes nothing and
// every object has one field manager.
func TestSyncCreatesEverything(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	p := f.provisioner(shippedClient(t, f.srv), &Options{EgressAllow: []EgressPeer{{CIDR: "10.96.0.1/32", Ports: []int32{443}}}})

	res := f.sync(t, p)
	want := all(Created)
	want["WorkerURL"] = Updated
	if diff := cmp.Diff(want, actions(res)); diff != "" {
		t.Errorf("first sync (-want +got):\n%s", diff)
	}
	if res.Rotation == nil || res.Rotation.OldID != "" {
		t.Errorf("first sync rotation = %+v, want a first token", res.Rotation)
	}
	e, err := f.st.GetEnv(ctx, f.tenant, f.env)
	if err != nil || e.WorkerURL != "http://talkide-worker."+f.ns+".svc.cluster.local:8080" {
		t.Errorf("env worker URL = %q, %v", e.WorkerURL, err)
	}

	admin := f.srv.Client(t)
	nsObj, err := admin.CoreV1().Namespaces().Get(ctx, f.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{LabelTenant: f.tenant, LabelEnv: f.env, "pod-security.kubernetes.io/enforce": "restricted"} {
		if nsObj.Labels[k] != v {
			t.Errorf("namespace label %s = %q, want %q", k, nsObj.Labels[k], v)
		}
	}
	sa, err := admin.CoreV1().ServiceAccounts(f.ns).Get(ctx, WorkerName, metav1.GetOptions{})
	if err != nil || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("ServiceAccount automount = %v, %v; want false", sa.AutomountServiceAccountToken, err)
	}
	role, err := admin.RbacV1().Roles(f.ns).Get(ctx, WorkerName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(WorkerRules(), role.Rules); diff != "" {
		t.Errorf("Role rules (-want +got):\n%s", diff)
	}
	sec, err := admin.CoreV1().Secrets(f.ns).Get(ctx, SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok := string(sec.Data[provision.KeyIdentityToken])
	if rec, err := provision.Authenticate(ctx, f.st, tok, f.clk.Now()); err != nil || rec.ID != res.Rotation.NewID || sec.Annotations[provision.AnnotationTokenID] != rec.ID {
		t.Errorf("Secret's token: %v (id %s, annotation %s)", err, res.Rotation.NewID, sec.Annotations[provision.AnnotationTokenID])
	}
	if string(sec.Data[provision.KeyCommandKeyID]) != "c1" || len(sec.Data[provision.KeyCommandKey]) == 0 {
		t.Errorf("Secret's command key: id %q", sec.Data[provision.KeyCommandKeyID])
	}
	pvc, err := admin.CoreV1().PersistentVolumeClaims(f.ns).Get(ctx, SessionsClaim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}) || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "nfs-rwx" ||
		pvc.Spec.Resources.Requests.Storage().String() != "10Gi" {
		t.Errorf("claim spec = %+v", pvc.Spec)
	}

	dep, err := admin.AppsV1().Deployments(f.ns).Get(ctx, WorkerName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ps := dep.Spec.Template.Spec
	c := ps.Containers[0]
	sc := c.SecurityContext
	checks := map[string]bool{
		"non-root":                 *ps.SecurityContext.RunAsNonRoot && *sc.RunAsNonRoot && *sc.RunAsUser != 0,
		"read-only root":           *sc.ReadOnlyRootFilesystem,
		"no privilege escalation":  !*sc.AllowPrivilegeEscalation,
		"capabilities dropped":     slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}),
		"seccomp RuntimeDefault":   sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault && ps.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault,
		"requests and limits":      !c.Resources.Requests.Cpu().IsZero() && !c.Resources.Limits.Memory().IsZero(),
		"probes":                   c.LivenessProbe.HTTPGet.Path == "/livez" && c.ReadinessProbe.HTTPGet.Path == "/readyz",
		"preStop":                  c.Lifecycle.PreStop.Sleep != nil,
		"grace covers the drain":   *ps.TerminationGracePeriodSeconds > drainSeconds+preStopSleep,
		"maxUnavailable 0":         dep.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() == 0,
		"maxSurge 1":               dep.Spec.Strategy.RollingUpdate.MaxSurge.IntValue() == 1,
		"Secret as a directory":    ps.Volumes[1].Secret.SecretName == SecretName && c.VolumeMounts[1].MountPath == SecretMount && c.VolumeMounts[1].SubPath == "",
		"sessions at /data/claude": ps.Volumes[0].PersistentVolumeClaim.ClaimName == SessionsClaim && c.VolumeMounts[0].MountPath == "/data/claude",
		"token automounted":        *ps.AutomountServiceAccountToken && ps.ServiceAccountName == WorkerName,
		"no API key":               !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "ANTHROPIC_API_KEY" }),
		"token file flag":          slices.Contains(c.Args, SecretMount+"/"+provision.KeyIdentityToken),
		"one replica":              dep.Spec.Replicas != nil && *dep.Spec.Replicas == 1,
		"POD_IP from the pod": slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
		}),
		"--advertise-host POD_IP": slices.Contains(c.Args, "--advertise-host") && c.Args[slices.Index(c.Args, "--advertise-host")+1] == "$(POD_IP)",
	}
	for name, ok := range checks {
		if !ok {
			t.Errorf("Deployment: %s does not hold: %+v", name, ps)
		}
	}
	svc, err := admin.CoreV1().Services(f.ns).Get(ctx, WorkerName, metav1.GetOptions{})
	if err != nil || svc.Spec.Ports[0].Port != 8080 || svc.Spec.Selector[NameLabel] != WorkerName {
		t.Errorf("Service = %+v, %v", svc.Spec, err)
	}
	np, err := admin.NetworkingV1().NetworkPolicies(f.ns).Get(ctx, WorkerName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(np.Spec.PolicyTypes) != 2 || len(np.Spec.Ingress) != 2 ||
		np.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "talkide" ||
		len(np.Spec.Egress) != 4 || np.Spec.Egress[2].To[0].IPBlock.CIDR != "10.96.0.1/32" {
		t.Errorf("NetworkPolicy = %+v", np.Spec)
	}
	// Replica to replica: from and to the env's own worker pods (a pod
	// selector alone: this namespace's), on the worker port only.
	wantPeer := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: podLabels(f.tenant, f.env)}}}
	tcp := corev1.ProtocolTCP
	wantPorts := []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptr(intstr.FromInt32(8080))}}
	if diff := cmp.Diff(networkingv1.NetworkPolicyIngressRule{From: wantPeer, Ports: wantPorts}, np.Spec.Ingress[1]); diff != "" {
		t.Errorf("NetworkPolicy's replica ingress (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(networkingv1.NetworkPolicyEgressRule{To: wantPeer, Ports: wantPorts}, np.Spec.Egress[3]); diff != "" {
		t.Errorf("NetworkPolicy's replica egress (-want +got):\n%s", diff)
	}
	pdb, err := admin.PolicyV1().PodDisruptionBudgets(f.ns).Get(ctx, WorkerName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil ||
		!cmp.Equal(pdb.Spec.Selector.MatchLabels, dep.Spec.Template.Labels) {
		t.Errorf("PodDisruptionBudget = %+v", pdb.Spec)
	}

	// Again: nothing changes, the token is kept.
	res = f.sync(t, p)
	if diff := cmp.Diff(all(Unchanged), actions(res)); diff != "" || res.Rotation != nil || res.Changed() {
		t.Errorf("second sync (-want +got):\n%s\nrotation %+v", diff, res.Rotation)
	}
	// One manager owns every object.
	for _, obj := range ownedObjects(t, admin, f.ns) {
		var managers []string
		for _, mf := range obj.GetManagedFields() {
			managers = append(managers, mf.Manager+"/"+string(mf.Operation))
		}
		if !slices.Equal(managers, []string{FieldManager + "/Apply"}) {
			t.Errorf("%T %s: managers %v, want only %s", obj, obj.GetName(), managers, FieldManager)
		}
	}
}

func ownedObjects(t *testing.T, cs kubernetes.Interface, ns string) []metav1.Object {
	t.Helper()
	ctx := t.Context()
	g := metav1.GetOptions{}
	var objs []metav1.Object
	add := func(o metav1.Object, err error) {
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	add(cs.CoreV1().Namespaces().Get(ctx, ns, g))
	add(cs.CoreV1().ServiceAccounts(ns).Get(ctx, WorkerName, g))
	add(cs.RbacV1().Roles(ns).Get(ctx, WorkerName, g))
	add(cs.RbacV1().RoleBindings(ns).Get(ctx, WorkerName, g))
	add(cs.CoreV1().Secrets(ns).Get(ctx, SecretName, g))
	add(cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, SessionsClaim, g))
	add(cs.AppsV1().Deployments(ns).Get(ctx, WorkerName, g))
	add(cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, WorkerName, g))
	add(cs.CoreV1().Services(ns).Get(ctx, WorkerName, g))
	add(cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, WorkerName, g))
	return objs
}

// The reconciler, running as the shipped ClusterRole, puts back a Service
// another manager deleted and a Role it widened, and keeps the fields only
// that manager set.
func TestReconcilerRepairsDrift(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	defer run(t, f.provisioner(shippedClient(t, f.srv), &Options{Resync: time.Hour}))()
	admin := f.srv.Client(t)
	waitFor(t, "the first sync", func(ctx context.Context) (bool, error) {
		_, err := admin.NetworkingV1().NetworkPolicies(f.ns).Get(ctx, WorkerName, metav1.GetOptions{})
		return err == nil, nil
	})

	// Another manager edits (an Update, as kubectl edit does).
	if err := admin.CoreV1().Services(f.ns).Delete(ctx, WorkerName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	role, err := admin.RbacV1().Roles(f.ns).Get(ctx, WorkerName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list"}})
	role.Labels["team"] = "platform"
	if _, err := admin.RbacV1().Roles(f.ns).Update(ctx, role, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}

	waitFor(t, "the repair", func(ctx context.Context) (bool, error) {
		if _, err := admin.CoreV1().Services(f.ns).Get(ctx, WorkerName, metav1.GetOptions{}); err != nil {
			return false, nil
		}
		r, err := admin.RbacV1().Roles(f.ns).Get(ctx, WorkerName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return cmp.Equal(r.Rules, WorkerRules()), nil
	})
	r, err := admin.RbacV1().Roles(f.ns).Get(ctx, WorkerName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Labels["team"] != "platform" {
		t.Errorf("the other manager's label is gone: %v", r.Labels)
	}
}

// An env added to the store while the reconciler runs (talkide admin env
// add writes only the store) is synced at its next look at the store,
// long before a resync.
func TestReconcilerFindsANewEnv(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	defer run(t, f.provisioner(shippedClient(t, f.srv), &Options{Resync: time.Hour, EnvPoll: 100 * time.Millisecond}))()
	admin := f.srv.Client(t)
	waitFor(t, "the first sync", func(ctx context.Context) (bool, error) {
		_, err := admin.AppsV1().Deployments(f.ns).Get(ctx, WorkerName, metav1.GetOptions{})
		return err == nil, nil
	})
	if _, err := provision.EnsureEnv(ctx, f.st, f.tenant, "staging", ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new env's worker", func(ctx context.Context) (bool, error) {
		_, err := admin.AppsV1().Deployments(provision.Namespace(f.tenant, "staging")).Get(ctx, WorkerName, metav1.GetOptions{})
		return err == nil, nil
	})
}

// run runs p's reconciler until the returned stop is called, which waits
// for it to return.
func run(t *testing.T, p *Provisioner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

func waitFor(t *testing.T, what string, cond wait.ConditionWithContextFunc) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// The worker's ServiceAccount may run and follow builds in its own
// namespace, and nothing else.
func TestWorkerRBAC(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	admin := f.srv.Client(t)
	if _, err := f.provisioner(admin, nil).Sync(ctx, f.tenant, f.env, nil); err != nil {
		t.Fatal(err)
	}
	other := f.srv.Namespace(t)
	sa := kubetest.ServiceAccountUser(f.ns, WorkerName)
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + f.ns, "system:authenticated"}
	tests := map[string]struct {
		attr  authorizationv1.ResourceAttributes
		allow bool
	}{
		"create jobs":              {authorizationv1.ResourceAttributes{Namespace: f.ns, Verb: "create", Group: "batch", Resource: "jobs"}, true},
		"watch jobs":               {authorizationv1.ResourceAttributes{Namespace: f.ns, Verb: "watch", Group: "batch", Resource: "jobs"}, true},
		"delete jobs":              {authorizationv1.ResourceAttributes{Namespace: f.ns, Verb: "delete", Group: "batch", Resource: "jobs"}, true},
		"get pods":                 {authorizationv1.ResourceAttributes{Namespace: f.ns, Verb: "get", Resource: "pods"}, true},
		"get pods/log":             {authorizationv1.ResourceAttributes{Namespace: f.ns, Verb: "get", Resource: "pods", Subresource: "log"}, true},
		"update jobs":              {authorizationv1.ResourceAttributes{Namespace: f.ns, Verb: "update", Group: "batch", Resource: "jobs"}, false},
		"create pods":              {authorizationv1.ResourceAttributes{Namespace: f.ns, Verb: "create", Resource: "pods"}, false},
		"exec into pods":           {authorizationv1.ResourceAttributes{Namespace: f.ns, Verb: "create", Resource: "pods", Subresource: "exec"}, false},
		"read secrets":             {authorizationv1.ResourceAttributes{Namespace: f.ns, Verb: "get", Resource: "secrets", Name: SecretName}, false},
		"list secrets":             {authorizationv1.ResourceAttributes{Namespace: f.ns, Verb: "list", Resource: "secrets"}, false},
		"create jobs elsewhere":    {authorizationv1.ResourceAttributes{Namespace: other, Verb: "create", Group: "batch", Resource: "jobs"}, false},
		"get pods/log elsewhere":   {authorizationv1.ResourceAttributes{Namespace: other, Verb: "get", Resource: "pods", Subresource: "log"}, false},
		"edit its own Role":        {authorizationv1.ResourceAttributes{Namespace: f.ns, Verb: "patch", Group: "rbac.authorization.k8s.io", Resource: "roles"}, false},
		"create jobs cluster-wide": {authorizationv1.ResourceAttributes{Verb: "create", Group: "batch", Resource: "jobs"}, false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			attr := tt.attr
			sar, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: sa, Groups: groups, ResourceAttributes: &attr},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if sar.Status.Allowed != tt.allow {
				t.Errorf("allowed = %v, want %v (%s)", sar.Status.Allowed, tt.allow, sar.Status.Reason)
			}
		})
	}
	// And for real, impersonating the account.
	as := kubetest.NewClient(t, f.srv.AsServiceAccount(f.ns, WorkerName))
	if _, err := as.CoreV1().Secrets(f.ns).Get(ctx, SecretName, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the worker reads its Secret through the API: err = %v, want Forbidden", err)
	}
	if _, err := as.BatchV1().Jobs(f.ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the worker lists its Jobs: %v", err)
	}
	if _, err := as.BatchV1().Jobs(other).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the worker lists another namespace's Jobs: err = %v, want Forbidden", err)
	}
}

// mintStatus asks the control-plane cp for a WorkerToken with token.
func mintStatus(t *testing.T, cp *httptest.Server, token string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, cp.URL+controlplane.MintPath, strings.NewReader(`{"conversation_id":"conv1"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := cp.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A rotation keeps both tokens valid at the mint endpoint for the grace
// period, then refuses the old one; the reconciler rotates a token that
// nears its expiry by itself.
func TestRotation(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	admin := f.srv.Client(t)
	p := f.provisioner(admin, &Options{TokenTTL: 30 * 24 * time.Hour, RotateBefore: 24 * time.Hour})
	f.sync(t, p)
	if err := f.st.PutUser(ctx, store.User{ID: "u1", Name: "U", CreatedAt: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.st.CreateConversation(ctx, store.Conversation{ID: "conv1", Tenant: f.tenant, Env: f.env, UserID: "u1", CreatedAt: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	kr, err := trust.NewKeyring("k1", map[string][]byte{"k1": bytes.Repeat([]byte{3}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	cps, err := controlplane.New(f.st, controlplane.Keys{Tokens: kr, CommandSecret: commandSecret, CommandKeyID: "c1"},
		controlplane.TenantEnv{Tenant: f.tenant, Env: f.env}, &controlplane.Options{Now: f.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	cp := httptest.NewServer(cps.Handler())
	defer cp.Close()

	secretToken := func() string {
		s, err := admin.CoreV1().Secrets(f.ns).Get(ctx, SecretName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return string(s.Data[provision.KeyIdentityToken])
	}
	old := secretToken()
	if got := mintStatus(t, cp, old); got != http.StatusOK {
		t.Fatalf("mint with the first token: %d", got)
	}

	res, err := p.Sync(ctx, f.tenant, f.env, &SyncOptions{Rotate: true, Grace: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rotation == nil || res.Rotation.OldID == "" || !res.Rotation.OldUntil.Equal(f.clk.Now().Add(10*time.Minute)) || actions(res)["Secret"] != Updated {
		t.Fatalf("rotation = %+v, changes %v", res.Rotation, res.Changes)
	}
	newTok := secretToken()
	if newTok == old {
		t.Fatal("the Secret still holds the old token")
	}
	f.clk.Advance(9 * time.Minute)
	for name, tok := range map[string]string{"old": old, "new": newTok} {
		if got := mintStatus(t, cp, tok); got != http.StatusOK {
			t.Errorf("within the grace period, mint with the %s token: %d", name, got)
		}
	}
	f.clk.Advance(time.Minute)
	if got := mintStatus(t, cp, old); got != http.StatusUnauthorized {
		t.Errorf("after the grace period, mint with the old token: %d, want 401", got)
	}
	if got := mintStatus(t, cp, newTok); got != http.StatusOK {
		t.Errorf("after the grace period, mint with the new token: %d", got)
	}
	// A sync keeps a good token.
	if res, err := p.Sync(ctx, f.tenant, f.env, nil); err != nil || res.Rotation != nil {
		t.Fatalf("sync after the rotation: %+v, %v", res.Rotation, err)
	}

	// Near the expiry, the lead time makes a sync rotate.
	f.clk.Advance(29*24*time.Hour + time.Minute)
	res = f.sync(t, p)
	if res.Rotation == nil || !strings.Contains(res.Rotation.Reason, "lead time") {
		t.Fatalf("sync near the expiry: rotation %+v", res.Rotation)
	}
	if got := mintStatus(t, cp, secretToken()); got != http.StatusOK {
		t.Errorf("mint with the automatically rotated token: %d", got)
	}

	// A broken Secret (someone pasted a wrong token) is repaired with a
	// new token.
	s, err := admin.CoreV1().Secrets(f.ns).Get(ctx, SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data[provision.KeyIdentityToken] = []byte(trust.NewIdentityToken().Token)
	if _, err := admin.CoreV1().Secrets(f.ns).Update(ctx, s, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	res, err = p.Sync(ctx, f.tenant, f.env, nil)
	if err != nil || res.Rotation == nil || res.Rotation.OldID != "" {
		t.Fatalf("sync of a broken Secret: %+v, %v", res.Rotation, err)
	}
	if got := mintStatus(t, cp, secretToken()); got != http.StatusOK {
		t.Errorf("mint with the repaired Secret's token: %d", got)
	}
}

// Delete revokes the identity first, even when it cannot delete the
// namespace; with KeepSessions the namespace and the claim remain and
// nothing else does.
func TestDelete(t *testing.T) {
	ctx := t.Context()
	t.Run("revokes first", func(t *testing.T) {
		f := newFixture(t)
		admin := f.srv.Client(t)
		if _, err := f.provisioner(admin, nil).Sync(ctx, f.tenant, f.env, nil); err != nil {
			t.Fatal(err)
		}
		// A user who may do everything but delete namespaces.
		noDelete := f.srv.User(t, &kubetest.UserOptions{Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}}}})
		res, err := f.provisioner(kubetest.NewClient(t, noDelete.Config), nil).Delete(ctx, f.tenant, f.env, nil)
		if !apierrors.IsForbidden(errors.Unwrap(err)) && !strings.Contains(err.Error(), "forbidden") {
			t.Fatalf("Delete without the right to delete namespaces: %v", err)
		}
		if len(res.Revoked) != 1 {
			t.Errorf("revoked %v, want the one token", res.Revoked)
		}
		toks, _ := f.st.ListIdentityTokens(ctx, f.tenant, f.env)
		for _, tk := range toks {
			if tk.RevokedAt.IsZero() || tk.RevokedAt.After(f.clk.Now()) {
				t.Errorf("token %s not revoked: %v", tk.ID, tk.RevokedAt)
			}
		}
		if _, err := f.provisioner(admin, nil).Sync(ctx, f.tenant, f.env, nil); !errors.Is(err, ErrRetired) {
			t.Errorf("sync of a deleted env: %v, want ErrRetired", err)
		}
		// The shipped role may: the namespace is deleted (it stays
		// Terminating on a server without the namespace controller).
		if _, err := f.provisioner(shippedClient(t, f.srv), nil).Delete(ctx, f.tenant, f.env, nil); err != nil {
			t.Fatal(err)
		}
		nsObj, err := admin.CoreV1().Namespaces().Get(ctx, f.ns, metav1.GetOptions{})
		if err == nil && nsObj.DeletionTimestamp == nil {
			t.Errorf("namespace not being deleted: %+v", nsObj.Status)
		}
	})
	t.Run("keep sessions", func(t *testing.T) {
		f := newFixture(t)
		admin := f.srv.Client(t)
		p := f.provisioner(shippedClient(t, f.srv), nil)
		f.sync(t, p)
		res, err := p.Delete(ctx, f.tenant, f.env, &DeleteOptions{KeepSessions: true})
		if err != nil {
			t.Fatal(err)
		}
		want := all(Deleted)
		want["Namespace"], want["PersistentVolumeClaim"] = Kept, Kept
		want["HorizontalPodAutoscaler"] = Absent
		if diff := cmp.Diff(want, map[string]Action(deleteActions(res))); diff != "" {
			t.Errorf("Delete --keep-sessions (-want +got):\n%s", diff)
		}
		st, err := p.Status(ctx, f.tenant, f.env)
		if err != nil {
			t.Fatal(err)
		}
		var exist []string
		for _, o := range st.Objects {
			if o.Exists {
				exist = append(exist, o.Kind)
			}
		}
		if !slices.Equal(exist, []string{"Namespace", "PersistentVolumeClaim"}) || !st.Retired {
			t.Errorf("after Delete --keep-sessions, objects %v exist (retired %v)", exist, st.Retired)
		}
		if nsObj, err := admin.CoreV1().Namespaces().Get(ctx, f.ns, metav1.GetOptions{}); err != nil || nsObj.DeletionTimestamp != nil {
			t.Errorf("namespace: %v, %v", nsObj.DeletionTimestamp, err)
		}
		// Adding the env again re-attaches the kept claim.
		if _, err := provision.EnsureEnv(ctx, f.st, f.tenant, f.env, ""); err != nil {
			t.Fatal(err)
		}
		res2 := f.sync(t, p)
		if a := actions(res2); a["PersistentVolumeClaim"] != Unchanged || a["Deployment"] != Created {
			t.Errorf("sync after re-adding: %v", a)
		}
	})
}

func deleteActions(r DeleteResult) map[string]Action {
	m := map[string]Action{}
	for _, c := range r.Changes {
		m[c.Kind] = c.Action
	}
	return m
}

func ptr[T any](v T) *T { return &v }
