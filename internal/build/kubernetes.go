package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/observe"
)

// Labels of a build Job and its pod.
const (
	LabelManagedBy    = "app.kubernetes.io/managed-by"
	LabelComponent    = "app.kubernetes.io/component"
	LabelTenant       = "talkide.dev/tenant"
	LabelEnv          = "talkide.dev/env"
	LabelConversation = "talkide.dev/conversation"
	LabelToolCall     = "talkide.dev/tool-call"
	// jobNameLabel is what the Job controller labels a Job's pods with.
	jobNameLabel = "batch.kubernetes.io/job-name"
)

// ContainerName is the build container of a build pod.
const ContainerName = "build"

// Paths inside a build pod.
const (
	podWorkspace  = "/workspace"
	podGradleHome = "/gradle-home"
	podROCache    = "/gradle-ro-cache"
	podTmp        = "/tmp"
	// CachePointer is the entry of the cache volume that names the current
	// generation of the read-only dependency cache (a symlink the seeding
	// Job switches); a build resolves it once, as it starts.
	CachePointer = "current"
	// CachePointerEnv tells a build pod's start-up script where the
	// pointer is.
	CachePointerEnv = "TALKIDE_GRADLE_CACHE_POINTER"
)

// pinCacheScript sets GRADLE_RO_DEP_CACHE to the generation the pointer
// names at this moment, by its real path, then runs the build. Gradle
// looks files up under that directory for the whole build, so a build
// that went through the pointer would start reading the next generation
// when a seeding switched it mid-build, and could find a jar it had
// already put on a classpath missing there. Resolved once, the build
// reads one generation from start to end, which the seeding keeps until
// no build can still be using it. The build's words are positional
// parameters: the shell never parses them.
const pinCacheScript = `if GRADLE_RO_DEP_CACHE=$(CDPATH= cd -P -- "$` + CachePointerEnv + `" 2>/dev/null && pwd -P); then
  export GRADLE_RO_DEP_CACHE
else
  unset GRADLE_RO_DEP_CACHE
  echo "[the Gradle dependency cache has no current generation yet: this build downloads every dependency]" >&2
fi
exec "$@"`

// PinCacheCommand wraps a build's command line so that it runs with the
// cache generation current when it starts (pinCacheScript).
func PinCacheCommand(argv []string) []string {
	return append([]string{"/bin/sh", "-c", pinCacheScript, "talkide-build"}, argv...)
}

// Defaults of KubernetesOptions.
const (
	DefaultClaimName        = "claude-sessions"
	DefaultTTLAfterFinished = time.Hour
	DefaultMaxConcurrent    = 4
	DefaultRunAsUser        = 1000
	// logDrain is how long a finished Job's log may take to be read to its
	// end before the Job is deleted anyway.
	logDrain = 15 * time.Second
	// apiTimeout bounds the calls made after the build's context ended
	// (deleting the Job).
	apiTimeout = 30 * time.Second
)

// Default resources of a build container: a Gradle build with a JVM of a
// gigabyte or two, and room for its test forks.
const (
	DefaultCPURequest    = "1"
	DefaultCPULimit      = "2"
	DefaultMemoryRequest = "2Gi"
	DefaultMemoryLimit   = "4Gi"
)

// KubernetesOptions configure a Kubernetes runner.
type KubernetesOptions struct {
	// Namespace is where build Jobs run: the worker's own (required).
	Namespace string
	// Tenant and Env label the Jobs.
	Tenant, Env string
	// Image is the Gradle builder image (a JDK; the wrapper brings Gradle).
	// Empty: Gradle builds are refused.
	Image string
	// ImageBuilder is the image of a maintained Kaniko fork's executor
	// (docs/builds.md says why Kaniko). Empty: image builds are refused.
	ImageBuilder string
	// RegistrySecret names a kubernetes.io/dockerconfigjson Secret the
	// image builder pushes with; it is mounted into the builder only,
	// never into the workspace.
	RegistrySecret string
	// ClaimName is the PersistentVolumeClaim of the session volume, which
	// holds the workspaces; default DefaultClaimName.
	ClaimName string
	// VolumeRoot is where the worker mounts that claim: a workspace is
	// mounted into the build pod by its path below it (subPath).
	VolumeRoot string
	// CacheClaim, when set, is a ReadWriteMany claim holding the read-only
	// Gradle dependency cache (CachePointer -> a generation holding
	// modules-2), mounted read-only; a build's GRADLE_RO_DEP_CACHE is the
	// generation the pointer names when the build starts.
	CacheClaim string
	// PodOptions are the build pods' uid, placement and resources.
	PodOptions
	// Timeout is the default activeDeadlineSeconds; default DefaultTimeout.
	Timeout time.Duration
	// TTLAfterFinished is ttlSecondsAfterFinished, a backstop should the
	// runner not delete a finished Job; default DefaultTTLAfterFinished.
	TTLAfterFinished time.Duration
	// MaxConcurrent bounds the Jobs this runner has in flight; more builds
	// wait in a queue and say so. Default DefaultMaxConcurrent.
	MaxConcurrent int
	Logger        *slog.Logger // nil: don't log
}

// Kubernetes runs builds as Jobs in the worker's namespace.
type Kubernetes struct {
	cs    kubernetes.Interface
	opts  KubernetesOptions
	slots chan struct{} // one token per Job in flight

	mu     sync.Mutex // guards queued
	queued int        // builds waiting for a slot
}

// NewKubernetes returns a runner that creates Jobs with cs; opts.Namespace
// and opts.VolumeRoot are required.
func NewKubernetes(cs kubernetes.Interface, opts *KubernetesOptions) (*Kubernetes, error) {
	o := defaults.Copy(opts)
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return nil, fmt.Errorf("build: namespace %q: %s", o.Namespace, strings.Join(errs, "; "))
	}
	if o.VolumeRoot == "" || !filepath.IsAbs(o.VolumeRoot) {
		return nil, errors.New("build: the session volume's mount path (absolute) is required")
	}
	defaults.IfZero(&o.ClaimName, DefaultClaimName)
	o.PodOptions = o.PodOptions.Filled()
	defaults.IfNotPositive(&o.Timeout, DefaultTimeout)
	o.Timeout = min(o.Timeout, MaxTimeout)
	defaults.IfNotPositive(&o.TTLAfterFinished, DefaultTTLAfterFinished)
	defaults.IfNotPositive(&o.MaxConcurrent, DefaultMaxConcurrent)
	defaults.Logger(&o.Logger)
	return &Kubernetes{cs: cs, opts: o, slots: make(chan struct{}, o.MaxConcurrent)}, nil
}

func (*Kubernetes) Name() string { return "kubernetes" }

// JobName is the name of the Job of one tool call of a conversation: the
// same call always names the same Job, so a worker that restarts finds it
// instead of starting a second build.
func JobName(conversation, toolCall string) string {
	sum := sha256.Sum256([]byte(conversation + "\x00" + toolCall))
	return "build-" + hex.EncodeToString(sum[:10])
}

func (k *Kubernetes) labels(req Request) map[string]string {
	l := map[string]string{
		LabelManagedBy:    "talkide",
		LabelComponent:    "build",
		LabelConversation: LabelValue(req.Conversation),
		LabelToolCall:     LabelValue(req.ToolCall),
	}
	if k.opts.Tenant != "" {
		l[LabelTenant] = LabelValue(k.opts.Tenant)
	}
	if k.opts.Env != "" {
		l[LabelEnv] = LabelValue(k.opts.Env)
	}
	return l
}

// Run creates the build's Job (or re-attaches to the one a previous worker
// started for the same tool call), follows its pod's log into req.Output,
// waits for the Job to finish, deletes it, and reads the JUnit reports
// from the workspace, which the Job wrote on the shared volume.
func (k *Kubernetes) Run(ctx context.Context, req Request) (Result, error) {
	began := time.Now()
	res := Result{ExitCode: -1}
	if err := req.Spec.Validate(req.Workspace); err != nil {
		return res, err
	}
	if req.Conversation == "" || req.ToolCall == "" {
		return res, errors.New("build: a Kubernetes build needs its conversation and tool call")
	}
	out := req.Output
	if out == nil {
		out = io.Discard
	}
	var lw lockedWriter
	lw.w = out
	name := JobName(req.Conversation, req.ToolCall)
	res.Where = "Job " + k.opts.Namespace + "/" + name
	log := k.opts.Logger.With("job", name, "conversation", req.Conversation, "tool_call", req.ToolCall)
	jobs := k.cs.BatchV1().Jobs(k.opts.Namespace)

	job, err := k.existing(ctx, req)
	if err != nil {
		return res, err
	}
	if job != nil {
		log.Info("re-attaching to a running build")
		fmt.Fprintf(&lw, "[re-attached to the build already running as %s]\n", res.Where)
	} else {
		spec, err := k.Job(req)
		if err != nil {
			return res, err
		}
		_, queue := observe.Start(ctx, observe.FromContext(ctx, "build"), "build queue")
		release, err := k.acquire(ctx, &lw)
		observe.End(queue, err, "canceled")
		if err != nil {
			return res, err
		}
		defer release()
		job, err = jobs.Create(ctx, spec, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			job, err = jobs.Get(ctx, name, metav1.GetOptions{})
		}
		if err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			return res, fmt.Errorf("build: creating the Job: %w", err)
		}
		log.Info("build Job created")
		trace.SpanFromContext(ctx).AddEvent("job created")
	}
	since := job.CreationTimestamp.Time
	if since.IsZero() {
		since = began
	}

	// The log follower runs until the pods' logs are drained; the Job's
	// status decides the outcome.
	logCtx, stopLogs := context.WithCancel(ctx)
	logsDone := make(chan struct{})
	jobDone := make(chan struct{})
	go func() {
		defer close(logsDone)
		k.followPods(logCtx, name, jobDone, &lw)
	}()
	final, err := k.waitJob(ctx, name)
	trace.SpanFromContext(ctx).AddEvent("job finished")
	close(jobDone)
	if err != nil {
		stopLogs()
		<-logsDone
		k.delete(name, log)
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		return res, err
	}
	select {
	case <-logsDone:
	case <-time.After(logDrain):
		log.Warn("the build's log was not drained in time; the Job is deleted anyway")
	case <-ctx.Done():
	}
	stopLogs()
	<-logsDone
	pod := k.lastPod(name)
	k.delete(name, log)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	res.Duration = time.Since(began)
	res.Status, res.ExitCode, res.Reason = jobStatus(final, pod, k.deadline(req))
	res.Tests, err = CollectTests(req.Workspace, since.Add(-reportSlack))
	return res, err
}

// lockedWriter serializes the writes of the log follower and the runner.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// existing returns the unfinished Job a previous worker created for the
// same tool call, found by its labels, or nil.
func (k *Kubernetes) existing(ctx context.Context, req Request) (*batchv1.Job, error) {
	sel := labels.SelectorFromSet(map[string]string{
		LabelManagedBy: "talkide", LabelConversation: LabelValue(req.Conversation), LabelToolCall: LabelValue(req.ToolCall),
	})
	list, err := k.cs.BatchV1().Jobs(k.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("build: looking for a running build: %w", err)
	}
	for i := range list.Items {
		j := &list.Items[i]
		if j.Name == JobName(req.Conversation, req.ToolCall) && j.DeletionTimestamp == nil {
			return j, nil
		}
	}
	return nil, nil
}

// acquire waits for a slot; a build that has to wait says so in its
// output.
func (k *Kubernetes) acquire(ctx context.Context, out io.Writer) (func(), error) {
	select {
	case k.slots <- struct{}{}:
		return func() { <-k.slots }, nil
	default:
	}
	k.mu.Lock()
	k.queued++
	ahead := k.queued
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.queued--
		k.mu.Unlock()
	}()
	fmt.Fprintf(out, "[queued: %d builds are running, the limit of this namespace; %d waiting including this one]\n", k.opts.MaxConcurrent, ahead)
	select {
	case k.slots <- struct{}{}:
		fmt.Fprintf(out, "[starting]\n")
		return func() { <-k.slots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (k *Kubernetes) deadline(req Request) time.Duration {
	if req.Timeout > 0 {
		return min(req.Timeout, MaxTimeout)
	}
	return k.opts.Timeout
}

// Job returns the Job of a validated request.
func (k *Kubernetes) Job(req Request) (*batchv1.Job, error) {
	rel, err := filepath.Rel(k.opts.VolumeRoot, req.Workspace)
	if err != nil || !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("build: the workspace %s is not on the session volume at %s; a build Job cannot mount it", req.Workspace, k.opts.VolumeRoot)
	}
	subPath := filepath.ToSlash(rel)
	lbl := k.labels(req)
	deadline := int64(k.deadline(req) / time.Second)
	ttl := int32(k.opts.TTLAfterFinished / time.Second)
	zero := int32(0)
	no := false

	volumes := []corev1.Volume{
		{Name: "workspace", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: k.opts.ClaimName}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	mounts := []corev1.VolumeMount{
		{Name: "workspace", MountPath: podWorkspace, SubPath: subPath},
		{Name: "tmp", MountPath: podTmp},
	}
	env := []corev1.EnvVar{{Name: "CI", Value: "true"}, {Name: "HOME", Value: podTmp}}
	c := corev1.Container{
		Name:            ContainerName,
		WorkingDir:      podWorkspace,
		Resources:       k.opts.Resources,
		ImagePullPolicy: corev1.PullIfNotPresent,
		SecurityContext: ContainerSecurity(k.opts.RunAsUser),
	}
	pod := corev1.PodSpec{
		RestartPolicy:                corev1.RestartPolicyNever,
		AutomountServiceAccountToken: &no,
		EnableServiceLinks:           &no,
		NodeSelector:                 k.opts.NodeSelector,
		Tolerations:                  k.opts.Tolerations,
		SecurityContext:              PodSecurity(k.opts.RunAsUser),
	}
	switch req.Spec.Kind {
	case KindGradle:
		if k.opts.Image == "" {
			return nil, fmt.Errorf("%w: no Gradle builder image is configured (--build-image)", ErrUnsupported)
		}
		c.Image = k.opts.Image
		c.Command = req.Spec.GradleArgv()
		volumes = append(volumes, corev1.Volume{Name: "gradle-home", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "gradle-home", MountPath: podGradleHome})
		env = append(env, corev1.EnvVar{Name: "GRADLE_USER_HOME", Value: podGradleHome})
		if k.opts.CacheClaim != "" {
			volumes = append(volumes, corev1.Volume{Name: "gradle-ro-cache", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: k.opts.CacheClaim, ReadOnly: true}}})
			mounts = append(mounts, corev1.VolumeMount{Name: "gradle-ro-cache", MountPath: podROCache, ReadOnly: true})
			env = append(env, corev1.EnvVar{Name: CachePointerEnv, Value: path.Join(podROCache, CachePointer)})
			c.Command = PinCacheCommand(c.Command)
		}
	case KindImage:
		if k.opts.ImageBuilder == "" {
			return nil, fmt.Errorf("%w: no image builder is configured (--build-image-builder)", ErrUnsupported)
		}
		c.Image = k.opts.ImageBuilder
		c.Args = []string{
			"--context=dir://" + path.Join(podWorkspace, req.Spec.Context),
			"--dockerfile=" + path.Join(podWorkspace, req.Spec.Dockerfile),
			"--destination=" + req.Spec.Image,
		}
		// Kaniko unpacks the base image over its own root file system and
		// needs root and the file-owning capabilities for it: it runs as
		// root of a user namespace of its own (hostUsers: false), an
		// unprivileged uid on the node, with RuntimeDefault seccomp, no
		// privilege escalation and only these capabilities.
		root := int64(0)
		c.SecurityContext.RunAsNonRoot, c.SecurityContext.RunAsUser, c.SecurityContext.RunAsGroup = &no, &root, &root
		c.SecurityContext.ReadOnlyRootFilesystem = &no
		c.SecurityContext.Capabilities.Add = []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID"}
		pod.SecurityContext.RunAsNonRoot, pod.SecurityContext.RunAsUser, pod.SecurityContext.RunAsGroup = &no, &root, &root
		pod.HostUsers = &no
		mounts[0].ReadOnly = true // an image build reads the workspace only
		if k.opts.RegistrySecret != "" {
			volumes = append(volumes, corev1.Volume{Name: "registry", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: k.opts.RegistrySecret, Items: []corev1.KeyToPath{{Key: corev1.DockerConfigJsonKey, Path: "config.json"}},
			}}})
			mounts = append(mounts, corev1.VolumeMount{Name: "registry", MountPath: "/kaniko/.docker", ReadOnly: true})
			env = append(env, corev1.EnvVar{Name: "DOCKER_CONFIG", Value: "/kaniko/.docker"})
		}
	}
	c.Env = env
	c.VolumeMounts = mounts
	pod.Containers = []corev1.Container{c}
	pod.Volumes = volumes
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: JobName(req.Conversation, req.ToolCall), Namespace: k.opts.Namespace, Labels: lbl},
		Spec: batchv1.JobSpec{
			BackoffLimit:            &zero, // the model decides on retries
			ActiveDeadlineSeconds:   &deadline,
			TTLSecondsAfterFinished: &ttl,
			PodFailurePolicy:        FailurePolicy(ContainerName),
			Template:                corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: pod},
		},
	}, nil
}

// jobOutcome is a finished Job's terminal condition.
type jobOutcome struct {
	ok      bool
	reason  string
	message string
}

// finished reads a Job's conditions, including the early ones the Job
// controller writes before the last pod is gone (SuccessCriteriaMet,
// FailureTarget).
func finished(j *batchv1.Job) (jobOutcome, bool) {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete, batchv1.JobSuccessCriteriaMet:
			return jobOutcome{ok: true}, true
		case batchv1.JobFailed, batchv1.JobFailureTarget:
			return jobOutcome{reason: c.Reason, message: c.Message}, true
		}
	}
	return jobOutcome{}, false
}

// JobListWatch lists and watches the one Job namespace/name, for a
// watch that outlives a broken connection (watchtools.UntilWithSync).
func JobListWatch(cs kubernetes.Interface, namespace, name string) *cache.ListWatch {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	return listWatch(cs.BatchV1().Jobs(namespace), func(o *metav1.ListOptions) { o.FieldSelector = sel })
}

// listWatcher is the part of a typed client that a ListWatch uses; L is
// its list type.
type listWatcher[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// listWatch lists and watches through c, each call's options narrowed by
// narrow to the objects wanted.
func listWatch[L runtime.Object](c listWatcher[L], narrow func(*metav1.ListOptions)) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			narrow(&o)
			return c.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			narrow(&o)
			return c.Watch(ctx, o)
		},
	}
}

// waitJob watches the Job until it has finished.
func (k *Kubernetes) waitJob(ctx context.Context, name string) (jobOutcome, error) {
	lw := JobListWatch(k.cs, k.opts.Namespace, name)
	var out jobOutcome
	_, err := watchtools.UntilWithSync(ctx, lw, &batchv1.Job{}, nil, func(ev watch.Event) (bool, error) {
		if ev.Type == watch.Deleted {
			return false, errors.New("build: the Job was deleted before it finished")
		}
		j, ok := ev.Object.(*batchv1.Job)
		if !ok {
			return false, nil
		}
		o, done := finished(j)
		out = o
		return done, nil
	})
	return out, err
}

// followPods follows the log of each pod the Job runs, one after the
// other (a disrupted pod is replaced), until the Job has finished
// (jobDone) and the logs of its pods have been read, or ctx ends.
func (k *Kubernetes) followPods(ctx context.Context, job string, jobDone <-chan struct{}, out io.Writer) {
	followed := map[string]bool{}
	follow := func(pod string) {
		followed[pod] = true
		FollowLog(ctx, &podLog{cs: k.cs, ns: k.opts.Namespace, pod: pod}, out)
	}
	for ctx.Err() == nil {
		podCtx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-jobDone:
				cancel()
			case <-podCtx.Done():
			}
		}()
		pod, err := k.nextPod(podCtx, job, followed)
		cancel()
		if err == nil {
			follow(pod)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		// The Job has finished: read what its pods not yet followed wrote.
		lctx, lcancel := context.WithTimeout(ctx, apiTimeout)
		list, err := k.cs.CoreV1().Pods(k.opts.Namespace).List(lctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(map[string]string{jobNameLabel: job}).String()})
		lcancel()
		if err != nil {
			return
		}
		for i := range list.Items {
			p := &list.Items[i]
			if s := buildContainer(p); !followed[p.Name] && s != nil && (s.State.Running != nil || s.State.Terminated != nil) {
				follow(p.Name)
			}
		}
		return
	}
}

// nextPod waits for a pod of the Job not yet followed whose build
// container has started (or ended).
func (k *Kubernetes) nextPod(ctx context.Context, job string, followed map[string]bool) (string, error) {
	sel := labels.SelectorFromSet(map[string]string{jobNameLabel: job}).String()
	lw := listWatch(k.cs.CoreV1().Pods(k.opts.Namespace), func(o *metav1.ListOptions) { o.LabelSelector = sel })
	var name string
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Pod{}, nil, func(ev watch.Event) (bool, error) {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok || ev.Type == watch.Deleted || followed[p.Name] {
			return false, nil
		}
		if s := buildContainer(p); s != nil && (s.State.Running != nil || s.State.Terminated != nil) {
			name = p.Name
			trace.SpanFromContext(ctx).AddEvent("pod running")
			return true, nil
		}
		return false, nil
	})
	return name, err
}

func buildContainer(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == ContainerName {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// lastPod returns the Job's newest pod, or nil.
func (k *Kubernetes) lastPod(job string) *corev1.Pod {
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	list, err := k.cs.CoreV1().Pods(k.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(map[string]string{jobNameLabel: job}).String()})
	if err != nil || len(list.Items) == 0 {
		return nil
	}
	last := &list.Items[0]
	for i := range list.Items {
		if list.Items[i].CreationTimestamp.After(last.CreationTimestamp.Time) {
			last = &list.Items[i]
		}
	}
	return last
}

// delete deletes the Job and, by Background propagation, its pods (a Job
// deleted without a policy orphans them). It runs after the build's
// context may have ended.
func (k *Kubernetes) delete(name string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	bg := metav1.DeletePropagationBackground
	err := k.cs.BatchV1().Jobs(k.opts.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) {
		log.Warn("could not delete the build Job; its ttlSecondsAfterFinished removes it later", "err", err)
	}
}

// jobStatus maps a finished Job (and its last pod) to a build status.
func jobStatus(o jobOutcome, pod *corev1.Pod, deadline time.Duration) (Status, int, string) {
	var term *corev1.ContainerStateTerminated
	if pod != nil {
		if s := buildContainer(pod); s != nil {
			term = s.State.Terminated
		}
	}
	if o.ok {
		return Succeeded, 0, ""
	}
	switch {
	case o.reason == batchv1.JobReasonDeadlineExceeded:
		return TimedOut, -1, fmt.Sprintf("the build ran past its deadline of %v (activeDeadlineSeconds); Kubernetes stopped it", deadline)
	case term != nil && term.Reason == "OOMKilled":
		return Killed, int(term.ExitCode), "the build ran out of memory (OOMKilled): it needs more than the build container's memory limit"
	case term != nil && term.ExitCode != 0:
		return Failed, int(term.ExitCode), fmt.Sprintf("exit status %d", term.ExitCode)
	}
	reason := "the build Job failed"
	if o.reason != "" {
		reason += " (" + o.reason + ")"
	}
	if o.message != "" {
		reason += ": " + o.message
	}
	return Failed, -1, reason
}

// podLog is a build pod's log through the API server (pods/log).
type podLog struct {
	cs  kubernetes.Interface
	ns  string
	pod string
}

func (p *podLog) Open(ctx context.Context, since time.Time, follow bool) (io.ReadCloser, error) {
	o := &corev1.PodLogOptions{Container: ContainerName, Follow: follow, Timestamps: true}
	if !since.IsZero() {
		st := metav1.NewTime(since)
		o.SinceTime = &st
	}
	return p.cs.CoreV1().Pods(p.ns).GetLogs(p.pod, o).Stream(ctx)
}

func (p *podLog) Ended(ctx context.Context) (bool, error) {
	pod, err := p.cs.CoreV1().Pods(p.ns).Get(ctx, p.pod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	s := buildContainer(pod)
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || s != nil && s.State.Terminated != nil, nil
}
