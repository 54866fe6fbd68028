// Package deploy holds the Kubernetes manifests of the control-plane
// (kustomize) and the Dockerfile; its tests render every overlay and have
// a real API server validate each object by a server-side dry-run.
package deploy

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/talkide/platform/internal/kubetest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// render runs kustomize on dir as kubectl kustomize does.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(b); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	return objs
}

// Every rendered object of every overlay passes a server-side dry-run
// apply: the server's validation, defaulting and admission, nothing stored.
func TestManifestsDryRun(t *testing.T) {
	srv := kubetest.Start(t)
	admin := srv.Client(t)
	ctx := t.Context()
	// Namespaced objects need their namespace to exist.
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "talkide"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(admin.Discovery()))
	for _, dir := range []string{"base", "overlays/dev", "overlays/prod", "overlays/cluster"} {
		t.Run(dir, func(t *testing.T) {
			objs := render(t, dir)
			kinds := map[string]int{}
			for _, o := range objs {
				kinds[o.GetKind()]++
				gvk := o.GroupVersionKind()
				m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if err != nil {
					t.Fatalf("%s: %v", gvk, err)
				}
				var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
				if o.GetNamespace() != "" {
					ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
				}
				if _, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: "deploy-test", DryRun: []string{metav1.DryRunAll}}); err != nil {
					t.Errorf("dry-run apply %s %s: %v", o.GetKind(), o.GetName(), err)
				}
			}
			for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Service", "PodDisruptionBudget"} {
				want := 1
				if dir == "overlays/cluster" && (k == "Deployment" || k == "Service") {
					want = 3 // and PostgreSQL's, and the simulator's
				}
				if kinds[k] != want {
					t.Errorf("%s: %d %s, want %d", dir, kinds[k], k, want)
				}
			}
		})
	}
	// Nothing was stored.
	if _, err := admin.AppsV1().Deployments("talkide").Get(ctx, "talkide-controlplane", metav1.GetOptions{}); err == nil {
		t.Error("a dry-run stored the Deployment")
	}
}

// The overlays set what they promise.
func TestOverlays(t *testing.T) {
	for dir, want := range map[string]struct {
		replicas int64
		image    string
	}{
		"overlays/dev":  {1, "talkide:dev"},
		"overlays/prod": {3, "registry.example.com/talkide:0.1.0"},
	} {
		for _, o := range render(t, dir) {
			if o.GetKind() != "Deployment" {
				continue
			}
			r, _, _ := unstructured.NestedInt64(o.Object, "spec", "replicas")
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			img := cs[0].(map[string]any)["image"]
			if r != want.replicas || img != want.image {
				t.Errorf("%s: replicas %d image %v, want %d %s", dir, r, img, want.replicas, want.image)
			}
		}
	}
}

// The Dockerfile's build: a static binary (no interpreter, no shared
// libraries), so it runs on distroless/static.
func TestStaticBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the build of the static binary")
	}
	out := filepath.Join(t.TempDir(), "talkide")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "../cmd/talkide")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary names a dynamic loader")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
	if b, err := exec.Command(out, "--help").CombinedOutput(); err != nil {
		t.Errorf("talkide --help: %v\n%s", err, b)
	}
}
