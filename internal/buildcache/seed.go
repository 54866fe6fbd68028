package buildcache

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/talkide/platform/internal/build"
)

// ErrRunning is returned when a seeding of the same cache is running: two
// would write at once.
var ErrRunning = errors.New("a seeding of this cache is already running")

// ErrFailed is wrapped by the error of a seeding whose Job failed; the
// pointer is as it was.
var ErrFailed = errors.New("the seeding failed")

// jobNameLabel is what the Job controller labels a Job's pods with.
const jobNameLabel = "batch.kubernetes.io/job-name"

// Seeding is one seeding, started or finished.
type Seeding struct {
	Job        string // namespace/name
	Generation string
	// Result is the promotion's report, once the Job has succeeded.
	Result *Result
}

// Start creates the seeding Job of a new generation. A seeding Job of the
// same cache that is still running is refused (ErrRunning); one that has
// finished, left for its logs, is deleted first.
func Start(ctx context.Context, cs kubernetes.Interface, o *SeedOptions, now time.Time) (*Seeding, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := checkClaims(ctx, cs, o); err != nil {
		return nil, err
	}
	var r [3]byte
	rand.Read(r[:])
	id := NewGenerationID(now, r)
	spec := Job(o, id)
	jobs := cs.BatchV1().Jobs(o.Namespace)
	s := &Seeding{Job: o.Namespace + "/" + spec.Name, Generation: id}
	old, err := jobs.Get(ctx, spec.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("buildcache: looking for a running seeding: %w", err)
	case old.DeletionTimestamp == nil && !finished(old):
		return nil, fmt.Errorf("%w: Job %s (generation %s, created %s); wait for it to end, or delete it", ErrRunning, s.Job, old.Labels[LabelGeneration], old.CreationTimestamp.UTC().Format(time.RFC3339))
	default:
		if err := removeFinished(ctx, cs, old); err != nil {
			return nil, err
		}
	}
	if _, err := jobs.Create(ctx, spec, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("%w: Job %s was created meanwhile", ErrRunning, s.Job)
		}
		return nil, fmt.Errorf("buildcache: creating the seeding Job: %w", err)
	}
	return s, nil
}

// checkClaims refuses a seeding whose claims are missing, or whose cache
// claim builds on several nodes could not all mount: the Job's pod would
// wait for them until its deadline. Not allowed to read claims, it leaves
// that to the pod.
func checkClaims(ctx context.Context, cs kubernetes.Interface, o *SeedOptions) error {
	for _, c := range []struct {
		name, what string
		shared     bool
	}{{o.CacheClaim, "cache claim", true}, {o.SessionClaim, "session claim (of the seed project)", false}} {
		pvc, err := cs.CoreV1().PersistentVolumeClaims(o.Namespace).Get(ctx, c.name, metav1.GetOptions{})
		switch {
		case apierrors.IsForbidden(err):
			continue
		case apierrors.IsNotFound(err):
			return fmt.Errorf("buildcache: the %s %s does not exist in the namespace %s", c.what, c.name, o.Namespace)
		case err != nil:
			return fmt.Errorf("buildcache: the %s %s: %w", c.what, c.name, err)
		case c.shared && !slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteMany):
			return fmt.Errorf("buildcache: the cache claim %s is %v, not ReadWriteMany: builds on several nodes read it while the seeding writes it", c.name, pvc.Spec.AccessModes)
		}
	}
	return nil
}

// removeFinished deletes a finished seeding Job and waits until it is
// gone. Its pods ended with it, so none of them still writes; Background
// propagation has them collected after.
func removeFinished(ctx context.Context, cs kubernetes.Interface, old *batchv1.Job) error {
	jobs := cs.BatchV1().Jobs(old.Namespace)
	bg := metav1.DeletePropagationBackground
	err := jobs.Delete(ctx, old.Name, metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &old.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("buildcache: deleting the finished seeding Job %s: %w", old.Name, err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		j, err := jobs.Get(ctx, old.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && j.UID != old.UID {
			return true, nil
		}
		return false, err
	})
}

// finished reports whether a Job has a terminal condition, the early
// ones included.
func finished(j *batchv1.Job) bool {
	_, done := outcome(j)
	return done
}

func outcome(j *batchv1.Job) (*batchv1.JobCondition, bool) {
	for i, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete, batchv1.JobSuccessCriteriaMet, batchv1.JobFailed, batchv1.JobFailureTarget:
			return &j.Status.Conditions[i], true
		}
	}
	return nil, false
}

// Wait watches the seeding's Job until it has finished and returns the
// promotion's Result, or an error wrapping ErrFailed that says which step
// failed. progress, when not nil, hears of the pod's steps.
func Wait(ctx context.Context, cs kubernetes.Interface, s *Seeding, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	ns, name, _ := strings.Cut(s.Job, "/")
	lw := build.JobListWatch(cs, ns, name)
	var cond *batchv1.JobCondition
	var uid types.UID
	_, err := watchtools.UntilWithSync(ctx, lw, &batchv1.Job{}, nil, func(ev watch.Event) (bool, error) {
		if ev.Type == watch.Deleted {
			return false, fmt.Errorf("%w: the Job %s was deleted before it finished", ErrFailed, s.Job)
		}
		j, ok := ev.Object.(*batchv1.Job)
		if !ok || j.Labels[LabelGeneration] != s.Generation {
			return false, nil
		}
		c, done := outcome(j)
		cond, uid = c, j.UID
		return done, nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("buildcache: stopped waiting; the Job %s goes on: %w", s.Job, ctx.Err())
		}
		return err
	}
	pod, err := lastPod(ctx, cs, ns, name, uid)
	if err != nil {
		return fmt.Errorf("buildcache: the Job %s finished, but its pod: %w", s.Job, err)
	}
	if cond.Type == batchv1.JobComplete || cond.Type == batchv1.JobSuccessCriteriaMet {
		st := containerState(pod, PromoteContainer)
		if st == nil || st.Terminated == nil || st.Terminated.Message == "" {
			return fmt.Errorf("buildcache: the Job %s succeeded but its promotion reported nothing; see kubectl logs -n %s job/%s -c %s", s.Job, ns, name, PromoteContainer)
		}
		var r Result
		if err := json.Unmarshal([]byte(st.Terminated.Message), &r); err != nil || r.Generation != s.Generation {
			return fmt.Errorf("buildcache: the Job %s succeeded but its promotion's report is not this generation's: %.200q", s.Job, st.Terminated.Message)
		}
		s.Result = &r
		return nil
	}
	return fmt.Errorf("%w (%s): %s; the pointer is as it was", ErrFailed, cond.Reason, failedStep(pod, ns, name, cond))
}

// failedStep says which container of the seeding pod failed, how, and
// where its log is.
func failedStep(pod *corev1.Pod, ns, job string, cond *batchv1.JobCondition) string {
	for _, c := range []struct{ name, what string }{{GradleContainer, "Gradle in the seed project"}, {PromoteContainer, "the promotion"}} {
		st := containerState(pod, c.name)
		if st == nil || st.Terminated == nil || st.Terminated.ExitCode == 0 {
			continue
		}
		msg := fmt.Sprintf("%s exited with status %d", c.what, st.Terminated.ExitCode)
		if st.Terminated.Reason != "" {
			msg += " (" + st.Terminated.Reason + ")"
		}
		if c.name == PromoteContainer && st.Terminated.Message != "" {
			msg += ": " + strings.TrimSpace(st.Terminated.Message)
		}
		return msg + fmt.Sprintf("; see kubectl logs -n %s job/%s -c %s", ns, job, c.name)
	}
	if cond.Message != "" {
		return cond.Message
	}
	return "the Job failed before either step ended"
}

func containerState(pod *corev1.Pod, name string) *corev1.ContainerState {
	if pod == nil {
		return nil
	}
	for _, l := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for i := range l {
			if l[i].Name == name {
				return &l[i].State
			}
		}
	}
	return nil
}

// lastPod is the newest pod of the Job with uid, nil when it has none:
// pods of an earlier seeding Job of the same name may not have been
// collected yet.
func lastPod(ctx context.Context, cs kubernetes.Interface, ns, job string, uid types.UID) (*corev1.Pod, error) {
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(map[string]string{jobNameLabel: job}).String()})
	if err != nil {
		return nil, err
	}
	var last *corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != uid {
			continue
		}
		if last == nil || p.CreationTimestamp.After(last.CreationTimestamp.Time) {
			last = p
		}
	}
	return last, nil
}
