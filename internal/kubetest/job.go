package kubetest

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// No Job controller runs on the test server, so a Job never starts a pod
// and never finishes by itself. These helpers play the controller's part at
// the end: they write the status it writes when the Job's one pod has
// succeeded or failed for good. The API server validates that status as it
// would the controller's (a terminal condition needs its *Target or
// SuccessCriteriaMet condition first, a completion time needs Complete).

// CompleteJob writes the status of a Job that succeeded to the Job named by
// job (its namespace and name; the rest is read afresh) and returns the
// updated Job.
func CompleteJob(t testing.TB, cs kubernetes.Interface, job *batchv1.Job) *batchv1.Job {
	t.Helper()
	return finishJob(t, cs, job, func(j *batchv1.Job, start, now metav1.Time) {
		j.Status.StartTime = &start
		j.Status.CompletionTime = &now
		j.Status.Active = 0
		j.Status.Succeeded = 1
		j.Status.Conditions = append(j.Status.Conditions,
			jobCondition(batchv1.JobSuccessCriteriaMet, "CompletionsReached", now),
			jobCondition(batchv1.JobComplete, "CompletionsReached", now))
	})
}

// FailJob writes the status of a Job whose pod failed past its backoff
// limit (reason BackoffLimitExceeded) and returns the updated Job.
func FailJob(t testing.TB, cs kubernetes.Interface, job *batchv1.Job) *batchv1.Job {
	t.Helper()
	return finishJob(t, cs, job, func(j *batchv1.Job, start, now metav1.Time) {
		j.Status.StartTime = &start
		j.Status.Active = 0
		j.Status.Failed = 1
		j.Status.Conditions = append(j.Status.Conditions,
			jobCondition(batchv1.JobFailureTarget, batchv1.JobReasonBackoffLimitExceeded, now),
			jobCondition(batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded, now))
	})
}

func finishJob(t testing.TB, cs kubernetes.Interface, job *batchv1.Job, set func(j *batchv1.Job, start, now metav1.Time)) *batchv1.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	jobs := cs.BatchV1().Jobs(job.Namespace)
	cur, err := jobs.Get(ctx, job.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Job %s/%s: %v", job.Namespace, job.Name, err)
	}
	if f := jobFinished(cur); f != "" {
		t.Fatalf("Job %s/%s has already finished (%s)", job.Namespace, job.Name, f)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	start := now
	if cur.Status.StartTime != nil {
		start = *cur.Status.StartTime
	}
	set(cur, start, now)
	updated, err := jobs.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("write the status of Job %s/%s: %v", job.Namespace, job.Name, err)
	}
	return updated
}

func jobCondition(typ batchv1.JobConditionType, reason string, now metav1.Time) batchv1.JobCondition {
	return batchv1.JobCondition{Type: typ, Status: corev1.ConditionTrue, Reason: reason, LastProbeTime: now, LastTransitionTime: now}
}

// jobFinished returns JobComplete or JobFailed for a finished Job, "" for
// one that is not.
func jobFinished(j *batchv1.Job) batchv1.JobConditionType {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c.Type
		}
	}
	return ""
}

// No scheduler or kubelet runs either. RunJobPod plays the Job controller
// and the scheduler: it creates job's pod, named name, on node, with the
// Job's pod template and the label and owner the controller gives it; then,
// as the kubelet, the status set writes into it. It returns the pod as
// stored.
func RunJobPod(t testing.TB, cs kubernetes.Interface, job *batchv1.Job, name, node string, set func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	yes := true
	spec := *job.Spec.Template.Spec.DeepCopy()
	spec.NodeName = node
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: job.Namespace, Labels: map[string]string{batchv1.JobNameLabel: job.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: &yes}}},
		Spec: spec,
	}
	created, err := cs.CoreV1().Pods(job.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the pod of Job %s/%s: %v", job.Namespace, job.Name, err)
	}
	return SetPodStatus(t, cs, created, set)
}

// SetPodStatus plays the kubelet: it writes the status set gives the pod
// named by pod (its namespace and name; the rest is read afresh) and
// returns the updated pod.
func SetPodStatus(t testing.TB, cs kubernetes.Interface, pod *corev1.Pod, set func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cur, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	set(cur)
	updated, err := cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("write the status of pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	return updated
}
