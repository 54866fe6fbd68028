package buildcache

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/talkide/platform/internal/build"
	"github.com/talkide/platform/internal/kubetest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

type seedFixture struct {
	admin *kubernetes.Clientset
	ns    string
	node  string
	opts  SeedOptions
}

func newSeedFixture(t *testing.T) *seedFixture {
	t.Helper()
	srv := kubetest.Start(t)
	f := &seedFixture{admin: srv.Client(t), ns: srv.Namespace(t)}
	f.node = srv.Node(t, nil)
	for _, c := range []string{"gradle-cache", build.DefaultClaimName} {
		createClaim(t, f.admin, f.ns, c, corev1.ReadWriteMany)
	}
	f.opts = SeedOptions{
		Namespace: f.ns, Tenant: "acme", Env: "dev",
		CacheClaim: "gradle-cache", Project: "build-seed/gradle",
		Gradle:       []string{"build", "-x", "test"},
		Image:        "builder.example.com/jdk:21",
		PromoteImage: "registry.example.com/talkide:1.0",
		PodOptions: build.PodOptions{
			NodeSelector: map[string]string{"talkide.dev/pool": "builds"},
			Tolerations:  []corev1.Toleration{{Key: "talkide.dev/builds", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
	}
	return f
}

func createClaim(t *testing.T, cs kubernetes.Interface, ns, name string, mode corev1.PersistentVolumeAccessMode) {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{mode},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (f *seedFixture) job(t *testing.T, s *Seeding) *batchv1.Job {
	t.Helper()
	_, name, _ := strings.Cut(s.Job, "/")
	j, err := f.admin.BatchV1().Jobs(f.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// runPod plays the Job controller and the kubelet: the Job's pod on the
// fake node, its Gradle container running.
func (f *seedFixture) runPod(t *testing.T, job *batchv1.Job) *corev1.Pod {
	t.Helper()
	gen := job.Labels[LabelGeneration]
	return kubetest.RunJobPod(t, f.admin, job, job.Name+"-"+gen[len(gen)-6:], f.node, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: GradleContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: PromoteContainer, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
	})
}

func (f *seedFixture) setStatus(t *testing.T, p *corev1.Pod, phase corev1.PodPhase, init, main corev1.ContainerState) {
	t.Helper()
	kubetest.SetPodStatus(t, f.admin, p, func(p *corev1.Pod) {
		p.Status.Phase = phase
		p.Status.InitContainerStatuses[0].State = init
		p.Status.ContainerStatuses[0].State = main
	})
}

func terminated(code int32, reason, msg string) corev1.ContainerState {
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg, FinishedAt: metav1.Now()}}
}

// promoteArgs runs the promotion container's command line the way
// `talkide admin build-cache promote` parses it, with the pod's paths
// mapped onto local directories: the claim and Gradle's emptyDir.
func promoteArgs(t *testing.T, c corev1.Container, claim, home string, now time.Time) (*Result, error) {
	t.Helper()
	args := map[string]string{}
	for i := 4; i+1 < len(c.Command); i += 2 {
		args[c.Command[i]] = c.Command[i+1]
	}
	if args["--root"] != podCache || args["--gradle-home"] != podGradleHome || args["--result-file"] != podResult {
		t.Fatalf("promote command %q", c.Command)
	}
	return Promote(claim, home, args["--generation"], now)
}

// gradleStep runs the seeding pod's Gradle container as the kubelet
// would, on local directories standing for its mounts: the seed project
// (read-only in the pod), the emptyDirs of Gradle's home and /tmp. It
// returns the exit status.
func gradleStep(t *testing.T, c corev1.Container, seed, home, tmp string) int {
	t.Helper()
	cmd := exec.Command(c.Command[0], c.Command[1:]...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for _, e := range c.Env {
		v := e.Value
		switch {
		case v == podSeed:
			v = seed
		case v == podGradleHome:
			v = home
		case strings.HasPrefix(v, podTmp):
			v = tmp + strings.TrimPrefix(v, podTmp)
		}
		cmd.Env = append(cmd.Env, e.Name+"="+v)
	}
	out, err := cmd.CombinedOutput()
	t.Logf("gradle container: %s", out)
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// seedProject is a project whose ./gradlew stands for Gradle: it
// downloads into GRADLE_USER_HOME and writes its build directory, or
// fails.
func seedProject(t *testing.T, version string, fail bool) string {
	t.Helper()
	dir := t.TempDir()
	script := `#!/bin/sh
echo "gradlew $*"
[ -w . ] || { echo "the project copy is not writable"; exit 3; }
mkdir -p build "$GRADLE_USER_HOME/caches/modules-2/files-2.1/com.acme/lib/` + version + `/abc" "$GRADLE_USER_HOME/caches/modules-2/files-2.1/com.acme/lib/` + version + `/def"
echo "jar ` + version + `" > "$GRADLE_USER_HOME/caches/modules-2/files-2.1/com.acme/lib/` + version + `/abc/lib-` + version + `.jar"
echo "pom ` + version + `" > "$GRADLE_USER_HOME/caches/modules-2/files-2.1/com.acme/lib/` + version + `/def/lib-` + version + `.pom"
: > "$GRADLE_USER_HOME/caches/modules-2/modules-2.lock"
`
	if fail {
		script += "echo 'BUILD FAILED'; exit 1\n"
	}
	if err := os.WriteFile(filepath.Join(dir, build.GradleWrapper), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestSeedJobSpec(t *testing.T) {
	f := newSeedFixture(t)
	s, err := Start(context.Background(), f.admin, &f.opts, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	j := f.job(t, s)
	ps := j.Spec.Template.Spec
	if len(ps.InitContainers) != 1 || len(ps.Containers) != 1 {
		t.Fatalf("containers: init %d, main %d", len(ps.InitContainers), len(ps.Containers))
	}
	g, p := ps.InitContainers[0], ps.Containers[0]
	mounted := func(c corev1.Container, vol string) *corev1.VolumeMount {
		for i := range c.VolumeMounts {
			if c.VolumeMounts[i].Name == vol {
				return &c.VolumeMounts[i]
			}
		}
		return nil
	}
	claimOf := func(vol string) *corev1.PersistentVolumeClaimVolumeSource {
		for _, v := range ps.Volumes {
			if v.Name == vol {
				return v.PersistentVolumeClaim
			}
		}
		return nil
	}
	env := map[string]string{}
	for _, e := range g.Env {
		env[e.Name] = e.Value
	}
	restricted := func(c corev1.Container) bool {
		sc := c.SecurityContext
		return *sc.RunAsNonRoot && *sc.RunAsUser == build.DefaultRunAsUser && *sc.ReadOnlyRootFilesystem && !*sc.AllowPrivilegeEscalation &&
			len(sc.Capabilities.Drop) == 1 && sc.Capabilities.Drop[0] == "ALL" && len(sc.Capabilities.Add) == 0 &&
			sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault
	}
	checks := map[string]bool{
		"name":                          j.Name == "seed-gradle-cache" && s.Job == f.ns+"/seed-gradle-cache",
		"backoffLimit 0":                *j.Spec.BackoffLimit == 0,
		"deadline":                      *j.Spec.ActiveDeadlineSeconds == int64(DefaultTimeout/time.Second),
		"ttl":                           *j.Spec.TTLSecondsAfterFinished == int32(build.DefaultTTLAfterFinished/time.Second),
		"pod failure policy":            j.Spec.PodFailurePolicy != nil && len(j.Spec.PodFailurePolicy.Rules) == 2,
		"restartPolicy Never":           ps.RestartPolicy == corev1.RestartPolicyNever,
		"no token":                      !*ps.AutomountServiceAccountToken && !*ps.EnableServiceLinks,
		"pod restricted":                *ps.SecurityContext.RunAsNonRoot && ps.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault,
		"gradle restricted":             restricted(g),
		"promote restricted":            restricted(p),
		"node pool":                     ps.NodeSelector["talkide.dev/pool"] == "builds" && len(ps.Tolerations) == 1,
		"labels":                        j.Labels[build.LabelComponent] == Component && j.Labels[build.LabelTenant] == "acme" && j.Labels[build.LabelEnv] == "dev" && j.Labels[LabelGeneration] == s.Generation && j.Spec.Template.Labels[LabelGeneration] == s.Generation,
		"gradle image and words":        g.Image == "builder.example.com/jdk:21" && g.Command[0] == "/bin/sh" && strings.Join(g.Command[4:], " ") == "./gradlew --console=plain --no-daemon build -x test",
		"fresh Gradle home":             env["GRADLE_USER_HOME"] == podGradleHome && mounted(g, "gradle-home") != nil && !mounted(g, "gradle-home").ReadOnly,
		"seed project read-only":        mounted(g, "seed") != nil && mounted(g, "seed").SubPath == "build-seed/gradle" && mounted(g, "seed").ReadOnly && claimOf("seed").ClaimName == build.DefaultClaimName && claimOf("seed").ReadOnly,
		"gradle cannot touch the cache": mounted(g, "cache") == nil,
		"cache read-write in promote":   mounted(p, "cache") != nil && !mounted(p, "cache").ReadOnly && claimOf("cache").ClaimName == "gradle-cache" && !claimOf("cache").ReadOnly,
		"promote reads Gradle's home":   mounted(p, "gradle-home") != nil && mounted(p, "gradle-home").ReadOnly,
		"promote command":               p.Image == "registry.example.com/talkide:1.0" && strings.Join(p.Command[:4], " ") == "/talkide admin build-cache promote" && strings.Contains(strings.Join(p.Command, " "), "--generation "+s.Generation),
		"result as termination message": p.TerminationMessagePath == podResult,
		"generation id":                 ValidID(s.Generation),
	}
	for name, ok := range checks {
		if !ok {
			t.Errorf("seeding Job: %s does not hold", name)
		}
	}
}

// The test plays the kubelet and the Job's work: Gradle fills its home,
// then (only then) the promotion runs over a directory standing for the
// claim. A second seeding meanwhile is refused; after a success the
// pointer names the new generation; a failed Gradle leaves it.
func TestSeedSwitchesOnlyAfterSuccess(t *testing.T) {
	f := newSeedFixture(t)
	ctx := context.Background()
	claim := t.TempDir()
	first := id(time.Now().Add(-time.Hour), 1)
	if _, err := Promote(claim, gradleHome(t, "1.0"), first, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}

	s, err := Start(ctx, f.admin, &f.opts, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Wait(ctx, f.admin, s, nil) }()
	job := f.job(t, s)
	pod := f.runPod(t, job)

	// No two writers: a second seeding while this one runs.
	if _, err := Start(ctx, f.admin, &f.opts, time.Now()); !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), s.Generation) {
		t.Errorf("a second seeding while one runs = %v", err)
	}
	if pointer(t, claim) != "generations/"+first {
		t.Fatal("the pointer moved while Gradle ran")
	}

	// Gradle succeeds; only then does the kubelet start the promotion.
	seed, home := seedProject(t, "2.0", false), t.TempDir()
	if code := gradleStep(t, job.Spec.Template.Spec.InitContainers[0], seed, home, t.TempDir()); code != 0 {
		t.Fatalf("the Gradle step exited %d", code)
	}
	if _, err := os.Stat(filepath.Join(seed, "build")); err == nil {
		t.Error("the seeding wrote into the seed project")
	}
	res, err := promoteArgs(t, job.Spec.Template.Spec.Containers[0], claim, home, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(claim, "current", "modules-2", "files-2.1", "com.acme", "lib", "2.0", "abc", "lib-2.0.jar")); err != nil || string(b) != "jar 2.0\n" {
		t.Errorf("the new generation through the pointer: %q, %v", b, err)
	}
	f.setStatus(t, pod, corev1.PodSucceeded, terminated(0, "Completed", ""), terminated(0, "Completed", string(res.JSON())))
	kubetest.CompleteJob(t, f.admin, job)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s.Result == nil || s.Result.Generation != s.Generation || s.Result.Previous != first || pointer(t, claim) != "generations/"+s.Generation {
		t.Fatalf("after success: result %+v, pointer %q", s.Result, pointer(t, claim))
	}

	// The next seeding replaces the finished Job; its Gradle fails, so the
	// promotion never starts and the pointer stays.
	s2, err := Start(ctx, f.admin, &f.opts, time.Now())
	if err != nil {
		t.Fatalf("a seeding after a finished one: %v", err)
	}
	go func() { done <- Wait(ctx, f.admin, s2, nil) }()
	job2 := f.job(t, s2)
	if job2.UID == job.UID || job2.Labels[LabelGeneration] != s2.Generation {
		t.Fatal("the finished Job was not replaced")
	}
	pod2 := f.runPod(t, job2)
	code := gradleStep(t, job2.Spec.Template.Spec.InitContainers[0], seedProject(t, "3.0", true), t.TempDir(), t.TempDir())
	if code != 1 {
		t.Fatalf("the failing Gradle step exited %d", code)
	}
	f.setStatus(t, pod2, corev1.PodFailed, terminated(int32(code), "Error", ""), corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}})
	kubetest.FailJob(t, f.admin, job2)
	err = <-done
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "Gradle in the seed project exited with status 1") || !strings.Contains(err.Error(), "-c gradle") {
		t.Errorf("a failed Gradle = %v", err)
	}
	if pointer(t, claim) != "generations/"+s.Generation {
		t.Errorf("after a failed seeding the pointer is %q", pointer(t, claim))
	}
}

func TestSeedRefusesBadOptions(t *testing.T) {
	f := newSeedFixture(t)
	createClaim(t, f.admin, f.ns, "rwo-cache", corev1.ReadWriteOnce)
	for name, change := range map[string]func(o *SeedOptions){
		"namespace":                  func(o *SeedOptions) { o.Namespace = "Bad_NS" },
		"no cache claim":             func(o *SeedOptions) { o.CacheClaim = "" },
		"cache is session":           func(o *SeedOptions) { o.CacheClaim = build.DefaultClaimName },
		"claim name":                 func(o *SeedOptions) { o.CacheClaim = "Gradle Cache" },
		"project outside":            func(o *SeedOptions) { o.Project = "../etc" },
		"project absolute":           func(o *SeedOptions) { o.Project = "/workspaces/x" },
		"project root":               func(o *SeedOptions) { o.Project = "." },
		"a conversation's workspace": func(o *SeedOptions) { o.Project = "workspaces/gradle-seed" },
		"a session's directory":      func(o *SeedOptions) { o.Project = "projects/x/../gradle" },
		"no words":                   func(o *SeedOptions) { o.Gradle = nil },
		"options only":               func(o *SeedOptions) { o.Gradle = []string{"--offline"} },
		"gradle home option":         func(o *SeedOptions) { o.Gradle = []string{"-g", "/cache", "build"} },
		"shell in a task":            func(o *SeedOptions) { o.Gradle = []string{"build;rm"} },
		"no image":                   func(o *SeedOptions) { o.Image = "" },
		"deadline beyond limit":      func(o *SeedOptions) { o.Timeout = build.MaxTimeout + time.Second },
		"missing cache claim":        func(o *SeedOptions) { o.CacheClaim = "no-such-claim" },
		"single-node claim":          func(o *SeedOptions) { o.CacheClaim = "rwo-cache" },
		"missing session claim":      func(o *SeedOptions) { o.SessionClaim = "no-such-claim" },
	} {
		o := f.opts
		change(&o)
		if _, err := Start(context.Background(), f.admin, &o, time.Now()); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	jobs, err := f.admin.BatchV1().Jobs(f.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(jobs.Items) != 0 {
		t.Errorf("%d Jobs after refused seedings (%v)", len(jobs.Items), err)
	}
}
