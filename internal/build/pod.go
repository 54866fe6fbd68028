package build

import (
	"crypto/sha256"
	"encoding/hex"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The pieces below are shared by the build Jobs and the cache-seeding Job
// (buildcache), which run the same Gradle image on the same node pool as
// the same uid: a change to how one is confined or placed must reach both.

// PodOptions shape the pod of a Job that runs the Gradle image: the build
// runner's and the cache-seeding Job take the same, so that a seeding runs
// as, and where, the builds it prepares for.
type PodOptions struct {
	// RunAsUser is the uid and gid of the containers: the owner of the
	// workspace files on the volume (the worker's). Default
	// DefaultRunAsUser.
	RunAsUser int64
	// NodeSelector and Tolerations place the Jobs on a build node pool.
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	// Resources of the Gradle container; zero: DefaultResources.
	Resources corev1.ResourceRequirements
}

// Filled returns p with the defaults of what it leaves unset.
func (p PodOptions) Filled() PodOptions {
	if p.RunAsUser <= 0 {
		p.RunAsUser = DefaultRunAsUser
	}
	if p.Resources.Requests == nil && p.Resources.Limits == nil {
		p.Resources = DefaultResources()
	}
	return p
}

// LabelValue is v when it is a valid label value, else a digest of it.
func LabelValue(v string) string {
	if len(validation.IsValidLabelValue(v)) == 0 {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "h-" + hex.EncodeToString(sum[:12])
}

// DefaultResources are the Gradle container's requests and limits when
// none are configured.
func DefaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(DefaultCPURequest), corev1.ResourceMemory: resource.MustParse(DefaultMemoryRequest)},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(DefaultCPULimit), corev1.ResourceMemory: resource.MustParse(DefaultMemoryLimit)},
	}
}

// ContainerSecurity confines a container to uid, as the restricted Pod
// Security Standard wants it. Each call returns its own values, which a
// caller may loosen for one container without touching another's.
func ContainerSecurity(uid int64) *corev1.SecurityContext {
	yes, no := true, false
	return &corev1.SecurityContext{
		RunAsNonRoot:             &yes,
		RunAsUser:                &uid,
		RunAsGroup:               &uid,
		AllowPrivilegeEscalation: &no,
		ReadOnlyRootFilesystem:   &yes,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// PodSecurity is the pod-level counterpart of ContainerSecurity.
func PodSecurity(uid int64) *corev1.PodSecurityContext {
	yes := true
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   &yes,
		RunAsUser:      &uid,
		RunAsGroup:     &uid,
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// FailurePolicy fails the Job at once when container ("": any container)
// exits non-zero. A pod evicted or preempted is not the Job's failure: a
// new pod runs it, without counting against backoffLimit.
func FailurePolicy(container string) *batchv1.PodFailurePolicy {
	exit := &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpNotIn, Values: []int32{0}}
	if container != "" {
		exit.ContainerName = &container
	}
	return &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
		{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}},
		{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: exit},
	}}
}
