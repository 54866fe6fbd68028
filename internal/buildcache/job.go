package buildcache

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/talkide/platform/internal/build"
)

// Containers of a seeding pod. Gradle runs as the init container and the
// promotion as the only container: Kubernetes starts the promotion only
// once Gradle has exited 0, so a failed seeding never reaches the
// pointer.
const (
	GradleContainer  = "gradle"
	PromoteContainer = "promote"
)

// Labels of a seeding Job besides build's.
const (
	// LabelGeneration is the generation a seeding Job writes.
	LabelGeneration = "talkide.dev/cache-generation"
	// Component is the seeding Jobs' app.kubernetes.io/component.
	Component = "build-cache-seed"
)

// Paths inside a seeding pod.
const (
	podCache      = "/cache"
	podSeed       = "/seed"
	podGradleHome = "/gradle-home"
	podTmp        = "/tmp"
	// podResult is where the promotion writes its Result: the container's
	// termination message, which the seeding command reads back.
	podResult = "/dev/termination-log"
)

// Defaults of SeedOptions.
const (
	DefaultTimeout      = time.Hour
	DefaultPromoteImage = "talkide:latest"
)

// seedScript copies the seed project out of the read-only session volume
// (Gradle writes into a project's .gradle and build directories, and a
// seeding must not touch a workspace a conversation may be using) and
// runs its wrapper with the words that follow. The paths come from the
// container's environment (seedEnv).
const seedScript = `set -eu
cp -R "$TALKIDE_SEED_PROJECT/." "$TALKIDE_SEED_COPY"
cd "$TALKIDE_SEED_COPY"
exec "$@"`

// SeedOptions say which cache to seed, from what, and how its Job runs.
type SeedOptions struct {
	// Namespace is the tenant-env's; Tenant and Env label the Job.
	Namespace, Tenant, Env string
	// CacheClaim is the ReadWriteMany claim of the cache: the one the
	// build Jobs mount read-only (--build-cache-claim). Only the seeding
	// Job's promotion mounts it writable.
	CacheClaim string
	// SessionClaim holds the seed project (default build.DefaultClaimName);
	// Project is its directory there, relative to the claim's root.
	SessionClaim, Project string
	// Gradle is what to run in the seed project: tasks and options, in
	// order, one word each.
	Gradle []string
	// Image is the Gradle builder image, the build Jobs' (--build-image).
	Image string
	// PromoteImage holds /talkide, which runs the promotion; default
	// DefaultPromoteImage.
	PromoteImage string
	// PodOptions are the build Jobs': the cache's files are theirs, and
	// the seeding runs on their node pool. RunAsUser is the uid of both
	// containers.
	build.PodOptions
	// Timeout is activeDeadlineSeconds: default DefaultTimeout, at most
	// build.MaxTimeout (the age past which Promote takes a work directory
	// for a leftover).
	Timeout time.Duration
	// TTLAfterFinished keeps the finished Job for its logs; default
	// build.DefaultTTLAfterFinished.
	TTLAfterFinished time.Duration
}

// Validate checks o and fills its defaults.
func (o *SeedOptions) Validate() error {
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return fmt.Errorf("buildcache: namespace %q: %s", o.Namespace, strings.Join(errs, "; "))
	}
	if o.SessionClaim == "" {
		o.SessionClaim = build.DefaultClaimName
	}
	for _, c := range []struct{ what, name string }{{"cache claim", o.CacheClaim}, {"session claim", o.SessionClaim}} {
		if c.name == "" {
			return fmt.Errorf("buildcache: the %s is required", c.what)
		}
		if errs := validation.IsDNS1123Subdomain(c.name); len(errs) > 0 {
			return fmt.Errorf("buildcache: %s %q: %s", c.what, c.name, strings.Join(errs, "; "))
		}
	}
	if o.CacheClaim == o.SessionClaim {
		return errors.New("buildcache: the cache claim must not be the session claim: builds mount the cache read-only")
	}
	p := filepath.ToSlash(filepath.Clean(o.Project))
	if o.Project == "" || !filepath.IsLocal(o.Project) || p == "." || strings.ContainsAny(o.Project, "\x00\n") {
		return fmt.Errorf("buildcache: the seed project %q must be a directory relative to the root of the session claim, inside it (like build-seed/gradle)", o.Project)
	}
	if top, _, _ := strings.Cut(p, "/"); conversationDirs[top] {
		return fmt.Errorf("buildcache: the seed project %q is under %s/, where conversations write: its agent could choose what every build of the tenant-env reads; put it in a directory of its own on the claim (like build-seed/gradle)", o.Project, top)
	}
	o.Project = p
	if err := build.ValidateGradleLine(o.Gradle); err != nil {
		return fmt.Errorf("buildcache: %w", err)
	}
	if o.Image == "" {
		return errors.New("buildcache: the Gradle builder image is required (the build Jobs' --build-image)")
	}
	if o.PromoteImage == "" {
		o.PromoteImage = DefaultPromoteImage
	}
	o.PodOptions = o.PodOptions.Filled()
	if o.Timeout < 0 || o.Timeout > build.MaxTimeout {
		return fmt.Errorf("buildcache: a seeding's deadline %s: want more than 0 and at most %s", o.Timeout, build.MaxTimeout)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.TTLAfterFinished <= 0 {
		o.TTLAfterFinished = build.DefaultTTLAfterFinished
	}
	return nil
}

// JobName is the seeding Job of a cache claim. One name per claim is what
// keeps seedings from writing at once: the API server refuses a second
// Job of the name while the first exists.
func JobName(cacheClaim string) string {
	if n := "seed-" + cacheClaim; len(n) <= validation.DNS1123LabelMaxLength-6 && len(validation.IsDNS1123Label(n)) == 0 {
		return n
	}
	sum := sha256.Sum256([]byte(cacheClaim))
	return "seed-" + hex.EncodeToString(sum[:10])
}

// Job returns the seeding Job of generation id for validated options.
func Job(o *SeedOptions, id string) *batchv1.Job {
	lbl := map[string]string{
		build.LabelManagedBy: "talkide",
		build.LabelComponent: Component,
		LabelGeneration:      id,
	}
	if o.Tenant != "" {
		lbl[build.LabelTenant] = build.LabelValue(o.Tenant)
	}
	if o.Env != "" {
		lbl[build.LabelEnv] = build.LabelValue(o.Env)
	}
	deadline := int64(o.Timeout / time.Second)
	ttl := int32(o.TTLAfterFinished / time.Second)
	zero := int32(0)
	no := false
	gradle := corev1.Container{
		Name:            GradleContainer,
		Image:           o.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         append([]string{"/bin/sh", "-c", seedScript, "talkide-seed"}, build.GradleLineArgv(o.Gradle)...),
		Env: []corev1.EnvVar{
			{Name: "CI", Value: "true"}, {Name: "HOME", Value: podTmp},
			// A fresh home: a generation holds what this seeding
			// downloaded, whole, and nothing an earlier one left.
			{Name: "GRADLE_USER_HOME", Value: podGradleHome},
			{Name: "TALKIDE_SEED_PROJECT", Value: podSeed},
			{Name: "TALKIDE_SEED_COPY", Value: podTmp + "/project"},
		},
		Resources: o.Resources,
		VolumeMounts: []corev1.VolumeMount{
			{Name: "seed", MountPath: podSeed, SubPath: o.Project, ReadOnly: true},
			{Name: "gradle-home", MountPath: podGradleHome},
			{Name: "tmp", MountPath: podTmp},
		},
		SecurityContext: build.ContainerSecurity(o.RunAsUser),
	}
	promote := corev1.Container{
		Name:            PromoteContainer,
		Image:           o.PromoteImage,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command: []string{"/talkide", "admin", "build-cache", "promote",
			"--root", podCache, "--gradle-home", podGradleHome, "--generation", id, "--result-file", podResult},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "cache", MountPath: podCache},
			{Name: "gradle-home", MountPath: podGradleHome, ReadOnly: true},
		},
		TerminationMessagePath:   podResult,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext:          build.ContainerSecurity(o.RunAsUser),
	}
	pod := corev1.PodSpec{
		RestartPolicy:                corev1.RestartPolicyNever,
		AutomountServiceAccountToken: &no,
		EnableServiceLinks:           &no,
		NodeSelector:                 o.NodeSelector,
		Tolerations:                  o.Tolerations,
		SecurityContext:              build.PodSecurity(o.RunAsUser),
		InitContainers:               []corev1.Container{gradle},
		Containers:                   []corev1.Container{promote},
		Volumes: []corev1.Volume{
			{Name: "cache", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: o.CacheClaim}}},
			{Name: "seed", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: o.SessionClaim, ReadOnly: true}}},
			{Name: "gradle-home", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: JobName(o.CacheClaim), Namespace: o.Namespace, Labels: lbl},
		Spec: batchv1.JobSpec{
			// A failed seeding changed nothing builds see; the operator
			// reads its log and runs it again.
			BackoffLimit:            &zero,
			ActiveDeadlineSeconds:   &deadline,
			TTLSecondsAfterFinished: &ttl,
			// A replaced pod writes the same generation afresh.
			PodFailurePolicy: build.FailurePolicy(""),
			Template:         corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: pod},
		},
	}
}

// conversationDirs are the session claim's top directories that
// conversations write, as the provisioned worker lays it out: each
// conversation's workspace, which its agent edits, and its session. A seed
// project there would let one conversation (or a prompt injected into it)
// choose the dependencies every build of the tenant-env is given.
var conversationDirs = map[string]bool{"workspaces": true, "projects": true}
