package admincmd

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talkide/platform/internal/buildcache"
	"github.com/talkide/platform/internal/kubetest"
)

// The seeding Job's last step as its container runs it: a Gradle home in,
// the pointer switched, the result as JSON in the termination message.
func TestAdminBuildCachePromote(t *testing.T) {
	claim, home := t.TempDir(), t.TempDir()
	jar := filepath.Join(home, "caches", "modules-2", "files-2.1", "com.acme", "lib", "1.0", "abc", "lib-1.0.jar")
	os.MkdirAll(filepath.Dir(jar), 0o755)
	os.WriteFile(jar, []byte("jar"), 0o644)
	os.WriteFile(filepath.Join(home, "caches", "modules-2", "modules-2.lock"), nil, 0o644)
	gen := "g20261202T120000Z-00aa01"
	result := filepath.Join(t.TempDir(), "termination-log")
	out, _ := mustAdmin(t, "build-cache", "promote", "--root", claim, "--gradle-home", home, "--generation", gen, "--result-file", result)
	if !strings.Contains(out, "generation "+gen+" is current (previous none: the first): 1 files") {
		t.Errorf("stdout = %q", out)
	}
	if target, err := os.Readlink(filepath.Join(claim, "current")); err != nil || target != "generations/"+gen {
		t.Errorf("pointer = %q, %v", target, err)
	}
	var r buildcache.Result
	b, _ := os.ReadFile(result)
	if err := json.Unmarshal(b, &r); err != nil || r.Generation != gen || r.Files != 1 {
		t.Errorf("result file %q: %+v, %v", b, r, err)
	}

	// A bad id is refused, and said in the termination message.
	if _, _, err := admin(t, "build-cache", "promote", "--root", claim, "--gradle-home", home, "--generation", "../x", "--result-file", result); err == nil {
		t.Error("a bad generation id was taken")
	}
	if b, _ := os.ReadFile(result); !strings.Contains(string(b), "not a generation id") {
		t.Errorf("termination message after a refusal: %q", b)
	}
	if target, _ := os.Readlink(filepath.Join(claim, "current")); target != "generations/"+gen {
		t.Errorf("the pointer moved after a refusal: %q", target)
	}

	// A report that cannot be written after the switch is a warning: the
	// promotion succeeded, and a failed exit would say the pointer stayed.
	next := "g20261202T130000Z-00aa02"
	out, stderr, err := admin(t, "build-cache", "promote", "--root", claim, "--gradle-home", home, "--generation", next,
		"--result-file", filepath.Join(t.TempDir(), "no-such-dir", "termination-log"))
	if err != nil || !strings.Contains(out, "generation "+next+" is current") || !strings.Contains(stderr, "could not be written") {
		t.Errorf("promote with an unwritable report: %v; stdout %q; stderr %q", err, out, stderr)
	}
	if target, _ := os.Readlink(filepath.Join(claim, "current")); target != "generations/"+next {
		t.Errorf("pointer = %q after the second promotion", target)
	}
}

// talkide admin build-cache seed against the test API server: the Job
// exists in the namespace with the flags' settings; a second seeding is
// refused while it runs; bad flags are refused before anything is created.
func TestAdminBuildCacheSeed(t *testing.T) {
	srv := kubetest.Start(t)
	ns := srv.Namespace(t)
	kubeconfig := kubetest.Kubeconfig(t, srv.Config(), "")
	cs := srv.Client(t)
	for _, c := range []string{"gradle-cache", "claude-sessions"} {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: c},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"build-cache", "seed", "--tenant", "acme", "--env", "dev", "--namespace", ns, "--kubeconfig", kubeconfig,
		"--project", "build-seed/gradle", "--gradle", "assemble -x test testClasses", "--build-image", "builder.example.com/jdk:21",
		"--build-cache-claim", "gradle-cache", "--build-node-selector", "pool=builds", "--build-toleration", "dedicated=builds:NoSchedule",
		"--build-memory-limit", "6Gi", "--talkide-image", "registry.example.com/talkide:1.0", "--timeout", "45m", "--no-wait"}

	for name, bad := range map[string][]string{
		"no project":      {"--project", ""},
		"project outside": {"--project", "../x"},
		"gradle home":     {"--gradle", "-g /cache build"},
		"deadline":        {"--timeout", "3h"},
		"toleration":      {"--build-toleration", "x:Never"},
		"memory":          {"--build-memory-limit", "lots"},
		"request above":   {"--build-memory-request", "8Gi"},
		"tenant":          {"--tenant", "Acme!"},
	} {
		if _, _, err := admin(t, append(append([]string(nil), args...), bad...)...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if jobs, _ := cs.BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{}); len(jobs.Items) != 0 {
		t.Fatalf("refused seedings created %d Jobs", len(jobs.Items))
	}

	out, _ := mustAdmin(t, args...)
	if !strings.Contains(out, "as Job "+ns+"/seed-gradle-cache") {
		t.Errorf("stdout = %q", out)
	}
	j, err := cs.BatchV1().Jobs(ns).Get(context.Background(), "seed-gradle-cache", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ps := j.Spec.Template.Spec
	g := ps.InitContainers[0]
	if got := strings.Join(g.Command[4:], " "); got != "./gradlew --console=plain --no-daemon assemble -x test testClasses" {
		t.Errorf("gradle command %q", got)
	}
	if *j.Spec.ActiveDeadlineSeconds != 45*60 || ps.NodeSelector["pool"] != "builds" || len(ps.Tolerations) != 1 ||
		g.Resources.Limits.Memory().String() != "6Gi" || ps.Containers[0].Image != "registry.example.com/talkide:1.0" {
		t.Errorf("the Job does not follow the flags: deadline %d, %v, %v, %v, %s", *j.Spec.ActiveDeadlineSeconds, ps.NodeSelector, ps.Tolerations, g.Resources.Limits, ps.Containers[0].Image)
	}
	if _, _, err := admin(t, args...); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("a second seeding while one runs = %v", err)
	}
}
