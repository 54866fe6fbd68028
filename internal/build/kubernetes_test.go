package build

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/talkide/platform/internal/build/buildtest"
	"github.com/talkide/platform/internal/kubetest"
	"github.com/talkide/platform/internal/syncbuf"
)

// workerRole is the Role the worker's ServiceAccount holds in its
// namespace, exactly: what the provisioner grants.
var workerRole = []rbacv1.PolicyRule{
	{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"create", "get", "list", "watch", "delete"}},
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
}

// fakeKubelet serves build pods' logs as a kubelet does, with timestamps
// and follow; a test appends lines and ends a pod's log.
type fakeKubelet struct {
	mu    sync.Mutex
	logs  map[string]*podLogLines
	conns int // log requests served
}

type podLogLines struct {
	lines []string // "ts text\n"
	ended bool
	more  chan struct{} // closed and replaced when lines are added or the log ends
}

func (k *fakeKubelet) pod(name string) *podLogLines {
	if k.logs == nil {
		k.logs = map[string]*podLogLines{}
	}
	l := k.logs[name]
	if l == nil {
		l = &podLogLines{more: make(chan struct{})}
		k.logs[name] = l
	}
	return l
}

func (k *fakeKubelet) write(pod string, lines ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.pod(pod)
	for _, s := range lines {
		l.lines = append(l.lines, time.Now().UTC().Format(time.RFC3339Nano)+" "+s+"\n")
	}
	close(l.more)
	l.more = make(chan struct{})
}

func (k *fakeKubelet) end(pod string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.pod(pod)
	l.ended = true
	close(l.more)
	l.more = make(chan struct{})
}

func (k *fakeKubelet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var since time.Time
	if s := q.Get("sinceTime"); s != "" {
		since, _ = time.Parse(time.RFC3339, s)
	}
	stamps := q.Get("timestamps") == "true"
	follow := q.Get("follow") == "true"
	k.mu.Lock()
	k.conns++
	k.mu.Unlock()
	sent := 0
	for {
		k.mu.Lock()
		l := k.pod(r.PathValue("pod"))
		lines, ended, more := l.lines[sent:], l.ended, l.more
		sent = len(l.lines)
		k.mu.Unlock()
		for _, line := range lines {
			ts, text, _ := strings.Cut(line, " ")
			if t, _ := time.Parse(time.RFC3339Nano, ts); t.Before(since) {
				continue
			}
			if !stamps {
				line = text
			}
			io.WriteString(w, line)
		}
		w.(http.Flusher).Flush()
		if !follow || ended {
			return
		}
		select {
		case <-more:
		case <-r.Context().Done():
			return
		}
	}
}

// kubeFixture is a namespace with the worker's Role bound to its
// ServiceAccount, a runner acting as that account, a node whose kubelet
// is fakeKubelet, and a workspace on the "session volume".
type kubeFixture struct {
	srv     *kubetest.Server
	admin   *kubernetes.Clientset
	ns      string
	node    string
	kubelet *fakeKubelet
	root    string // the session volume's mount path
	ws      string
	runner  *Kubernetes
}

func newKubeFixture(t *testing.T, opts *KubernetesOptions) *kubeFixture {
	t.Helper()
	return newKubeFixtureTB(t, opts)
}

func newKubeFixtureTB(t testing.TB, opts *KubernetesOptions) *kubeFixture {
	t.Helper()
	srv := kubetest.Start(t)
	f := &kubeFixture{srv: srv, admin: srv.Client(t), ns: srv.Namespace(t), kubelet: &fakeKubelet{}}
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "talkide-worker"}, Rules: workerRole}
	if _, err := f.admin.RbacV1().Roles(f.ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "talkide-worker"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "talkide-worker", Namespace: f.ns}},
		RoleRef:    rbacv1.RoleRef{Kind: "Role", APIGroup: rbacv1.GroupName, Name: "talkide-worker"},
	}
	if _, err := f.admin.RbacV1().RoleBindings(f.ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(kubetest.ContainerLogsPattern, f.kubelet)
	f.node = srv.Node(t, mux)
	f.root = t.TempDir()
	f.ws = filepath.Join(f.root, "workspaces", "conv1")
	buildtest.FakeGradle(t, f.ws)
	var o KubernetesOptions
	if opts != nil {
		o = *opts
	}
	if o.Namespace == "" {
		o.Namespace = f.ns
	}
	o.VolumeRoot, o.Tenant, o.Env = f.root, "acme", "dev"
	if o.Image == "" {
		o.Image = "builder.example.com/jdk:21"
	}
	r, err := NewKubernetes(kubetest.NewClient(t, srv.AsServiceAccount(f.ns, "talkide-worker")), &o)
	if err != nil {
		t.Fatal(err)
	}
	f.runner = r
	return f
}

func (f *kubeFixture) request(call string, out io.Writer) Request {
	return Request{Spec: Spec{Tasks: []string{"test"}}, Conversation: "conv1", ToolCall: call, Workspace: f.ws, Output: out}
}

type runResult struct {
	res Result
	err error
}

func (f *kubeFixture) start(ctx context.Context, req Request) chan runResult {
	done := make(chan runResult, 1)
	go func() {
		res, err := f.runner.Run(ctx, req)
		done <- runResult{res, err}
	}()
	return done
}

// waitJob waits for the Job of a tool call to exist.
func (f *kubeFixture) waitJob(t *testing.T, call string, done chan runResult) *batchv1.Job {
	t.Helper()
	name := JobName("conv1", call)
	for {
		j, err := f.admin.BatchV1().Jobs(f.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			return j
		}
		select {
		case r := <-done:
			t.Fatalf("Run ended before its Job was created: %+v, %v", r.res, r.err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startRunning starts the build of call, writing to out, and runs its
// Job's pod.
func (f *kubeFixture) startRunning(t *testing.T, ctx context.Context, call string, out io.Writer) (chan runResult, *batchv1.Job, *corev1.Pod) {
	t.Helper()
	done := f.start(ctx, f.request(call, out))
	job := f.waitJob(t, call, done)
	return done, job, f.runPod(t, job)
}

// runPod plays the Job controller and the kubelet: it starts the Job's
// pod on the fake node, running.
func (f *kubeFixture) runPod(t testing.TB, job *batchv1.Job) *corev1.Pod {
	t.Helper()
	return kubetest.RunJobPod(t, f.admin, job, job.Name+"-x1", f.node, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, Image: p.Spec.Containers[0].Image, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	})
}

// endPod marks the pod's build container terminated with code.
func (f *kubeFixture) endPod(t testing.TB, p *corev1.Pod, code int32, reason string) {
	t.Helper()
	kubetest.SetPodStatus(t, f.admin, p, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodSucceeded
		if code != 0 {
			p.Status.Phase = corev1.PodFailed
		}
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, FinishedAt: metav1.Now()}}
	})
	f.kubelet.end(p.Name)
}

func waitOutput(t *testing.T, out *syncbuf.Buffer, s string, done chan runResult) {
	t.Helper()
	for !strings.Contains(out.String(), s) {
		select {
		case r := <-done:
			t.Fatalf("Run ended before its output had %q: %+v, %v; output %q", s, r.res, r.err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestKubernetesBuildSucceeds(t *testing.T) {
	f := newKubeFixture(t, &KubernetesOptions{
		PodOptions: PodOptions{
			NodeSelector: map[string]string{"talkide.dev/pool": "builds"},
			Tolerations:  []corev1.Toleration{{Key: "talkide.dev/builds", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
		CacheClaim: "gradle-cache",
	})
	var out syncbuf.Buffer
	done := f.start(context.Background(), f.request("toolu_ok", &out))
	job := f.waitJob(t, "toolu_ok", done)
	checkJobSpec(t, f, job)

	pod := f.runPod(t, job)
	f.kubelet.write(pod.Name, "> Task :test", "OkTest > one() PASSED")
	// The log arrives while the build runs.
	waitOutput(t, &out, "OkTest > one() PASSED\n", done)

	// The pod writes its reports on the shared volume, then ends.
	os.MkdirAll(filepath.Join(f.ws, "build/test-results/test"), 0o755)
	os.WriteFile(filepath.Join(f.ws, "build/test-results/test/TEST-a.xml"), []byte(`<testsuite><testcase classname="A" name="one"/><testcase classname="A" name="two"/></testsuite>`), 0o644)
	f.kubelet.write(pod.Name, "BUILD SUCCESSFUL in 3s")
	f.endPod(t, pod, 0, "Completed")
	kubetest.CompleteJob(t, f.admin, job)

	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.res.Status != Succeeded || r.res.ExitCode != 0 || r.res.Where != "Job "+f.ns+"/"+job.Name {
		t.Errorf("result = %+v", r.res)
	}
	if r.res.Tests == nil || r.res.Tests.Tests != 2 {
		t.Errorf("tests = %+v", r.res.Tests)
	}
	if want := "> Task :test\nOkTest > one() PASSED\nBUILD SUCCESSFUL in 3s\n"; out.String() != want {
		t.Errorf("output = %q, want %q", out.String(), want)
	}
	// Deleted with Background propagation: gone at once. (Without a
	// policy the API server would keep it with the orphan finalizer, its
	// pods left behind.)
	if _, err := f.admin.BatchV1().Jobs(f.ns).Get(context.Background(), job.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Job is still there after the build: %v", err)
	}
}

func checkJobSpec(t *testing.T, f *kubeFixture, job *batchv1.Job) {
	t.Helper()
	s := job.Spec
	ps := s.Template.Spec
	c := ps.Containers[0]
	sc := c.SecurityContext
	checks := map[string]bool{
		"backoffLimit 0":             s.BackoffLimit != nil && *s.BackoffLimit == 0,
		"activeDeadlineSeconds":      s.ActiveDeadlineSeconds != nil && *s.ActiveDeadlineSeconds == int64(DefaultTimeout/time.Second),
		"ttlSecondsAfterFinished":    s.TTLSecondsAfterFinished != nil && *s.TTLSecondsAfterFinished == int32(DefaultTTLAfterFinished/time.Second),
		"pod failure policy":         s.PodFailurePolicy != nil && len(s.PodFailurePolicy.Rules) == 2,
		"restartPolicy Never":        ps.RestartPolicy == corev1.RestartPolicyNever,
		"no service account token":   ps.AutomountServiceAccountToken != nil && !*ps.AutomountServiceAccountToken,
		"pod non-root":               ps.SecurityContext.RunAsNonRoot != nil && *ps.SecurityContext.RunAsNonRoot,
		"pod seccomp RuntimeDefault": ps.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault,
		"container non-root":         *sc.RunAsNonRoot && *sc.RunAsUser == DefaultRunAsUser,
		"read-only root":             *sc.ReadOnlyRootFilesystem,
		"no privilege escalation":    !*sc.AllowPrivilegeEscalation,
		"drop ALL":                   len(sc.Capabilities.Drop) == 1 && sc.Capabilities.Drop[0] == "ALL" && len(sc.Capabilities.Add) == 0,
		"seccomp RuntimeDefault":     sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault,
		"requests and limits":        !c.Resources.Requests.Cpu().IsZero() && !c.Resources.Limits.Memory().IsZero(),
		"image":                      c.Image == "builder.example.com/jdk:21",
		"command pinning the cache":  len(c.Command) == 8 && c.Command[0] == "/bin/sh" && strings.Join(c.Command[4:], " ") == "./gradlew --console=plain --no-daemon test",
		"workspace subPath":          c.VolumeMounts[0].MountPath == "/workspace" && c.VolumeMounts[0].SubPath == "workspaces/conv1" && ps.Volumes[0].PersistentVolumeClaim.ClaimName == DefaultClaimName,
		"node pool":                  ps.NodeSelector["talkide.dev/pool"] == "builds" && len(ps.Tolerations) == 1,
		"labels": job.Labels[LabelTenant] == "acme" && job.Labels[LabelEnv] == "dev" && job.Labels[LabelConversation] == "conv1" &&
			job.Labels[LabelToolCall] != "" && s.Template.Labels[LabelConversation] == "conv1",
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	checks["GRADLE_USER_HOME on an emptyDir"] = env["GRADLE_USER_HOME"] == podGradleHome
	checks["the cache pointer for the start-up script"] = env[CachePointerEnv] == "/gradle-ro-cache/current" && env["GRADLE_RO_DEP_CACHE"] == ""
	var roCache bool
	for _, v := range ps.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "gradle-cache" && v.PersistentVolumeClaim.ReadOnly {
			roCache = true
		}
	}
	checks["read-only cache claim"] = roCache
	for name, ok := range checks {
		if !ok {
			t.Errorf("Job spec: %s does not hold", name)
		}
	}
}

func TestKubernetesBuildFails(t *testing.T) {
	f := newKubeFixture(t, nil)
	var out syncbuf.Buffer
	done, job, pod := f.startRunning(t, context.Background(), "toolu_fail", &out)
	f.kubelet.write(pod.Name, "FailTest > breaks() FAILED", "BUILD FAILED in 2s")
	f.endPod(t, pod, 1, "Error")
	kubetest.FailJob(t, f.admin, job)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.res.Status != Failed || r.res.ExitCode != 1 || r.res.Reason != "exit status 1" {
		t.Errorf("result = %+v", r.res)
	}
	if !strings.Contains(out.String(), "BUILD FAILED") {
		t.Errorf("output = %q", out.String())
	}
}

func TestKubernetesDeadlineExceeded(t *testing.T) {
	f := newKubeFixture(t, nil)
	done := f.start(context.Background(), f.request("toolu_slow", nil))
	job := f.waitJob(t, "toolu_slow", done)
	now := metav1.Now()
	job.Status.StartTime = &now
	for _, typ := range []batchv1.JobConditionType{batchv1.JobFailureTarget, batchv1.JobFailed} {
		job.Status.Conditions = append(job.Status.Conditions, batchv1.JobCondition{Type: typ, Status: corev1.ConditionTrue,
			Reason: batchv1.JobReasonDeadlineExceeded, Message: "Job was active longer than specified deadline", LastTransitionTime: now})
	}
	if _, err := f.admin.BatchV1().Jobs(f.ns).UpdateStatus(context.Background(), job, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.res.Status != TimedOut || !strings.Contains(r.res.Reason, "deadline of 30m0s") {
		t.Errorf("result = %+v", r.res)
	}
}

func TestKubernetesInterruptDeletesTheJob(t *testing.T) {
	f := newKubeFixture(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var out syncbuf.Buffer
	done, job, pod := f.startRunning(t, ctx, "toolu_int", &out)
	f.kubelet.write(pod.Name, "working")
	waitOutput(t, &out, "working\n", done)
	cancel()
	r := <-done
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Run after an interrupt = %+v, %v", r.res, r.err)
	}
	if _, err := f.admin.BatchV1().Jobs(f.ns).Get(context.Background(), job.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the interrupted build's Job is still there: %v", err)
	}
}

func TestKubernetesQueue(t *testing.T) {
	f := newKubeFixture(t, &KubernetesOptions{MaxConcurrent: 1})
	first := f.start(context.Background(), f.request("toolu_q1", nil))
	job1 := f.waitJob(t, "toolu_q1", first)
	var out2 syncbuf.Buffer
	second := f.start(context.Background(), f.request("toolu_q2", &out2))
	waitOutput(t, &out2, "[queued:", second)
	jobs, err := f.admin.BatchV1().Jobs(f.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(jobs.Items) != 1 {
		t.Fatalf("with a limit of 1, %d Jobs exist (%v)", len(jobs.Items), err)
	}
	kubetest.CompleteJob(t, f.admin, job1)
	if r := <-first; r.err != nil || r.res.Status != Succeeded {
		t.Fatalf("first build: %+v, %v", r.res, r.err)
	}
	job2 := f.waitJob(t, "toolu_q2", second)
	kubetest.CompleteJob(t, f.admin, job2)
	if r := <-second; r.err != nil || r.res.Status != Succeeded {
		t.Fatalf("second build: %+v, %v", r.res, r.err)
	}
	if !strings.Contains(out2.String(), "[starting]") {
		t.Errorf("the queued build did not say it started: %q", out2.String())
	}
}

func TestKubernetesReattachAfterRestart(t *testing.T) {
	f := newKubeFixture(t, nil)
	// The Job a worker created before it died.
	req := f.request("toolu_re", nil)
	if err := req.Spec.Validate(req.Workspace); err != nil {
		t.Fatal(err)
	}
	spec, err := f.runner.Job(req)
	if err != nil {
		t.Fatal(err)
	}
	job, err := f.admin.BatchV1().Jobs(f.ns).Create(context.Background(), spec, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := f.runPod(t, job)
	f.kubelet.write(pod.Name, "before the restart")

	// The restarted worker runs the same tool call.
	var out syncbuf.Buffer
	done := f.start(context.Background(), f.request("toolu_re", &out))
	waitOutput(t, &out, "before the restart\n", done)
	f.endPod(t, pod, 0, "Completed")
	kubetest.CompleteJob(t, f.admin, job)
	r := <-done
	if r.err != nil || r.res.Status != Succeeded {
		t.Fatalf("re-attached build: %+v, %v", r.res, r.err)
	}
	if !strings.Contains(out.String(), "[re-attached to the build already running as Job "+f.ns+"/"+job.Name+"]") {
		t.Errorf("output = %q", out.String())
	}
}

func TestKubernetesRBAC(t *testing.T) {
	f := newKubeFixture(t, nil)
	other := f.srv.Namespace(t)
	r, err := NewKubernetes(f.runner.cs, &KubernetesOptions{Namespace: other, VolumeRoot: f.root, Image: "b.example.com/jdk:21"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Run(context.Background(), f.request("toolu_rbac", nil))
	if !apierrors.IsForbidden(errors.Unwrap(err)) && !strings.Contains(fmt.Sprint(err), "forbidden") {
		t.Errorf("a build in another namespace = %v, want forbidden", err)
	}
	jobs, _ := f.admin.BatchV1().Jobs(other).List(context.Background(), metav1.ListOptions{})
	if len(jobs.Items) != 0 {
		t.Errorf("a Job was created in another namespace")
	}
}

func TestKubernetesImageJob(t *testing.T) {
	f := newKubeFixture(t, &KubernetesOptions{ImageBuilder: "builder.example.com/kaniko-executor:1", RegistrySecret: "registry-push"})
	os.MkdirAll(filepath.Join(f.ws, "svc"), 0o755)
	os.WriteFile(filepath.Join(f.ws, "svc", "Dockerfile"), []byte("FROM scratch\n"), 0o644)
	req := f.request("toolu_img", nil)
	req.Spec = Spec{Kind: KindImage, Context: "svc", Image: "registry.example.com/team/app:1.0"}
	done := f.start(context.Background(), req)
	job := f.waitJob(t, "toolu_img", done)
	ps := job.Spec.Template.Spec
	c := ps.Containers[0]
	if got := strings.Join(c.Args, " "); got != "--context=dir:///workspace/svc --dockerfile=/workspace/svc/Dockerfile --destination=registry.example.com/team/app:1.0" {
		t.Errorf("args = %q", got)
	}
	if ps.HostUsers == nil || *ps.HostUsers || *c.SecurityContext.AllowPrivilegeEscalation || c.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || !c.VolumeMounts[0].ReadOnly {
		t.Errorf("image builder security: hostUsers %v, %+v, workspace read-only %v", ps.HostUsers, c.SecurityContext, c.VolumeMounts[0].ReadOnly)
	}
	var secret bool
	for _, v := range ps.Volumes {
		secret = secret || v.Secret != nil && v.Secret.SecretName == "registry-push"
	}
	if !secret {
		t.Error("the registry Secret is not mounted")
	}
	pod := f.runPod(t, job)
	f.endPod(t, pod, 0, "Completed")
	kubetest.CompleteJob(t, f.admin, job)
	if r := <-done; r.err != nil || r.res.Status != Succeeded {
		t.Fatalf("image build: %+v, %v", r.res, r.err)
	}
}
