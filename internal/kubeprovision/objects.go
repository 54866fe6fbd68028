package kubeprovision

import (
	"strconv"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	autoscalingv2ac "k8s.io/client-go/applyconfigurations/autoscaling/v2"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"

	"github.com/talkide/platform/internal/provision"
	"github.com/talkide/platform/internal/store"
)

// The worker pod's user: not root, and the owner (by fsGroup) of the
// session volume. 65532 is distroless's "nonroot".
const workerUID = 65532

// preStopSleep keeps a terminating pod serving while the Service's
// endpoints drop it, so no new command reaches a worker that is draining.
const preStopSleep = 5

// drainSeconds is how long the worker lets running turns finish after
// SIGTERM (talkide worker's own grace). The pod's grace period covers the
// preStop sleep, the drain and a margin for the last reports.
const (
	drainSeconds       = 60
	terminationSeconds = preStopSleep + drainSeconds + 10
)

// TurnsMetric is the worker replicas' gauge of running turns (on each
// replica's /metrics) that the autoscaler scales on, as a pods metric.
const TurnsMetric = "talkide_worker_turns_running"

// scaleDownWindow is how long the autoscaler looks back before it removes
// a replica: it removes one only when no recommendation of the last ten
// minutes asked for it, so a burst of turns that pauses (a user reading
// a reply) finds its replicas still there, and a removed replica, whose
// conversations move to another through the lease, is not brought back a
// minute later.
const scaleDownWindow = 600

// envObjects are the apply configurations of one tenant-env, in the order
// they are applied: the namespace first, RBAC before the pod that uses it,
// the Secret and claim before the Deployment that mounts them.
type envObjects struct {
	tenant, env, ns string
	// scale is the env's resolved scale: the Deployment's replicas when
	// fixed, the autoscaler's bounds otherwise.
	scale          store.EnvScale
	namespace      *corev1ac.NamespaceApplyConfiguration
	serviceAccount *corev1ac.ServiceAccountApplyConfiguration
	role           *rbacv1ac.RoleApplyConfiguration
	roleBinding    *rbacv1ac.RoleBindingApplyConfiguration
	claim          *corev1ac.PersistentVolumeClaimApplyConfiguration
	deployment     *appsv1ac.DeploymentApplyConfiguration
	service        *corev1ac.ServiceApplyConfiguration
	networkPolicy  *networkingv1ac.NetworkPolicyApplyConfiguration
	// autoscaler is nil for a fixed count of replicas: then Sync deletes
	// any the env had.
	autoscaler       *autoscalingv2ac.HorizontalPodAutoscalerApplyConfiguration
	disruptionBudget *policyv1ac.PodDisruptionBudgetApplyConfiguration
}

// labels are on every object of the tenant-env.
func labels(tenant, env string) map[string]string {
	return map[string]string{
		ManagedByLabel: ManagedByValue,
		PartOfLabel:    "talkide",
		NameLabel:      WorkerName,
		LabelTenant:    tenant,
		LabelEnv:       env,
	}
}

// podLabels select the worker's pods (Deployment, Service, NetworkPolicy).
func podLabels(tenant, env string) map[string]string {
	return map[string]string{NameLabel: WorkerName, LabelTenant: tenant, LabelEnv: env}
}

// WorkerRules are the worker's permissions in its own namespace: what
// creating and following a build Job needs, nothing else. The
// provisioner's ClusterRole must hold the same (RBAC refuses to create a
// Role granting more than its creator holds).
func WorkerRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"create", "get", "list", "watch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
	}
}

// objects are the apply configurations of tenant/env at scale. The
// Deployment's replicas are those of a fixed scale; an autoscaled one's
// are set by Sync from the Deployment's current count.
func (p *Provisioner) objects(tenant, env string, scale store.EnvScale) envObjects {
	ns := provision.Namespace(tenant, env)
	l := labels(tenant, env)
	o := envObjects{tenant: tenant, env: env, ns: ns, scale: scale.Resolved()}

	nsLabels := labels(tenant, env)
	// Pod Security admission refuses any pod of the namespace that is not
	// "restricted"; warn and audit say the same to kubectl and the log.
	for _, mode := range []string{"enforce", "warn", "audit"} {
		nsLabels["pod-security.kubernetes.io/"+mode] = "restricted"
		nsLabels["pod-security.kubernetes.io/"+mode+"-version"] = "latest"
	}
	o.namespace = corev1ac.Namespace(ns).WithLabels(nsLabels)

	// Pods of the namespace (build Jobs) get no API token by default; the
	// worker's own pod asks for one, since it creates the Jobs.
	o.serviceAccount = corev1ac.ServiceAccount(WorkerName, ns).WithLabels(l).WithAutomountServiceAccountToken(false)

	role := rbacv1ac.Role(WorkerName, ns).WithLabels(l)
	for _, r := range WorkerRules() {
		role.WithRules(rbacv1ac.PolicyRule().WithAPIGroups(r.APIGroups...).WithResources(r.Resources...).WithVerbs(r.Verbs...))
	}
	o.role = role
	o.roleBinding = rbacv1ac.RoleBinding(WorkerName, ns).WithLabels(l).
		WithSubjects(rbacv1ac.Subject().WithKind(rbacv1.ServiceAccountKind).WithName(WorkerName).WithNamespace(ns)).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("Role").WithName(WorkerName))

	claim := corev1ac.PersistentVolumeClaimSpec().
		WithAccessModes(corev1.ReadWriteMany).
		WithResources(corev1ac.VolumeResourceRequirements().WithRequests(corev1.ResourceList{corev1.ResourceStorage: p.o.SessionsSize}))
	if p.o.StorageClass != "" {
		claim.WithStorageClassName(p.o.StorageClass)
	}
	o.claim = corev1ac.PersistentVolumeClaim(SessionsClaim, ns).WithLabels(l).WithSpec(claim)

	o.deployment = p.deployment(tenant, env, ns, l)
	if !o.scale.Autoscaled() {
		o.deployment.Spec.WithReplicas(int32(o.scale.MinReplicas))
	} else {
		o.autoscaler = autoscaler(ns, l, o.scale)
	}
	o.disruptionBudget = disruptionBudget(tenant, env, ns, l)

	o.service = corev1ac.Service(WorkerName, ns).WithLabels(l).WithSpec(corev1ac.ServiceSpec().
		WithType(corev1.ServiceTypeClusterIP).
		WithSelector(podLabels(tenant, env)).
		WithPorts(corev1ac.ServicePort().WithName("command").WithProtocol(corev1.ProtocolTCP).
			WithPort(p.o.WorkerPort).WithTargetPort(intstr.FromString("command"))))

	o.networkPolicy = p.networkPolicy(tenant, env, ns, l)
	return o
}

func (p *Provisioner) deployment(tenant, env, ns string, l map[string]string) *appsv1ac.DeploymentApplyConfiguration {
	args := []string{"worker",
		"--tenant", tenant, "--env", env,
		"--listen", ":" + strconv.Itoa(int(p.o.WorkerPort)),
		"--identity-token-file", SecretMount + "/" + provision.KeyIdentityToken,
		// The file names its key id: a rotated command key reaches the
		// worker with the Secret, with no new argument and no restart.
		"--command-key-file", SecretMount + "/" + provision.KeyCommandKey,
		"--workspaces", SessionsMount + "/workspaces",
		// Build Jobs mount the same claim with a workspace as subPath,
		// worked out from where this pod mounts it, and run as the owner
		// of the workspace files: this pod's user.
		"--build-claim-mount", SessionsMount,
		"--build-run-as-user", strconv.Itoa(workerUID),
		// Each replica tells the others (and the control-plane) where it
		// holds its conversations: its own pod's address, since the
		// Service's name reaches any replica.
		"--advertise-host", "$(POD_IP)",
	}
	args = append(args, p.o.WorkerArgs...)
	probe := func(path string, period, failures int32) *corev1ac.ProbeApplyConfiguration {
		return corev1ac.Probe().
			WithHTTPGet(corev1ac.HTTPGetAction().WithPath(path).WithPort(intstr.FromString("command"))).
			WithPeriodSeconds(period).WithTimeoutSeconds(3).WithFailureThreshold(failures)
	}
	container := corev1ac.Container().
		WithName("worker").
		WithImage(p.o.Image).
		WithArgs(args...).
		WithEnv(
			corev1ac.EnvVar().WithName("TALKIDE_GATEWAY_BASE_URL").WithValue(p.o.ControlPlaneURL),
			corev1ac.EnvVar().WithName("CLAUDE_CONFIG_DIR").WithValue(SessionsMount),
			corev1ac.EnvVar().WithName("HOME").WithValue("/tmp"),
			corev1ac.EnvVar().WithName("POD_IP").WithValueFrom(corev1ac.EnvVarSource().
				WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath("status.podIP"))),
		).
		WithPorts(corev1ac.ContainerPort().WithName("command").WithContainerPort(p.o.WorkerPort).WithProtocol(corev1.ProtocolTCP)).
		WithResources(corev1ac.ResourceRequirements().
			WithRequests(corev1.ResourceList{corev1.ResourceCPU: p.o.CPURequest, corev1.ResourceMemory: p.o.MemoryRequest}).
			WithLimits(corev1.ResourceList{corev1.ResourceCPU: p.o.CPULimit, corev1.ResourceMemory: p.o.MemoryLimit})).
		WithLivenessProbe(probe("/livez", 10, 3)).
		WithReadinessProbe(probe("/readyz", 5, 2)).
		WithLifecycle(corev1ac.Lifecycle().WithPreStop(corev1ac.LifecycleHandler().WithSleep(corev1ac.SleepAction().WithSeconds(preStopSleep)))).
		WithSecurityContext(corev1ac.SecurityContext().
			WithRunAsNonRoot(true).
			WithRunAsUser(workerUID).WithRunAsGroup(workerUID).
			WithAllowPrivilegeEscalation(false).
			WithReadOnlyRootFilesystem(true).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")).
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName("sessions").WithMountPath(SessionsMount),
			// A directory, not subPath files: only a directory mount sees
			// the kubelet's updates (the ..data swap) after a rotation.
			corev1ac.VolumeMount().WithName("token").WithMountPath(SecretMount).WithReadOnly(true),
			corev1ac.VolumeMount().WithName("tmp").WithMountPath("/tmp"),
		)
	var secretMode int32 = 0o440 // readable by the worker's group (fsGroup) only
	pod := corev1ac.PodSpec().
		WithServiceAccountName(WorkerName).
		WithAutomountServiceAccountToken(true).
		WithTerminationGracePeriodSeconds(terminationSeconds).
		WithSecurityContext(corev1ac.PodSecurityContext().
			WithRunAsNonRoot(true).
			WithRunAsUser(workerUID).WithRunAsGroup(workerUID).WithFSGroup(workerUID).
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))).
		WithContainers(container).
		WithVolumes(
			corev1ac.Volume().WithName("sessions").WithPersistentVolumeClaim(corev1ac.PersistentVolumeClaimVolumeSource().WithClaimName(SessionsClaim)),
			corev1ac.Volume().WithName("token").WithSecret(corev1ac.SecretVolumeSource().WithSecretName(SecretName).WithDefaultMode(secretMode)),
			corev1ac.Volume().WithName("tmp").WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		)
	return appsv1ac.Deployment(WorkerName, ns).WithLabels(l).WithSpec(appsv1ac.DeploymentSpec().
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(podLabels(tenant, env))).
		// A second pod starts before the first stops: the session lease on
		// the shared volume hands each conversation over, so two replicas
		// for a moment are safe and no command finds no worker.
		WithStrategy(appsv1ac.DeploymentStrategy().WithType("RollingUpdate").
			WithRollingUpdate(appsv1ac.RollingUpdateDeployment().
				WithMaxUnavailable(intstr.FromInt32(0)).WithMaxSurge(intstr.FromInt32(1)))).
		WithTemplate(corev1ac.PodTemplateSpec().WithLabels(podLabels(tenant, env)).WithSpec(pod)))
}

func (p *Provisioner) networkPolicy(tenant, env, ns string, l map[string]string) *networkingv1ac.NetworkPolicyApplyConfiguration {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	cpPeer := networkingv1ac.NetworkPolicyPeer().WithNamespaceSelector(metav1ac.LabelSelector().
		WithMatchLabels(map[string]string{"kubernetes.io/metadata.name": p.o.ControlPlaneNamespace}))
	port := func(proto corev1.Protocol, n int32) *networkingv1ac.NetworkPolicyPortApplyConfiguration {
		return networkingv1ac.NetworkPolicyPort().WithProtocol(proto).WithPort(intstr.FromInt32(n))
	}
	egress := []*networkingv1ac.NetworkPolicyEgressRuleApplyConfiguration{
		networkingv1ac.NetworkPolicyEgressRule().WithTo(cpPeer).WithPorts(port(tcp, p.o.ControlPlanePort)),
		// DNS, wherever the cluster serves it.
		networkingv1ac.NetworkPolicyEgressRule().WithPorts(port(udp, 53), port(tcp, 53)),
	}
	for _, e := range p.o.EgressAllow {
		r := networkingv1ac.NetworkPolicyEgressRule().WithTo(networkingv1ac.NetworkPolicyPeer().WithIPBlock(networkingv1ac.IPBlock().WithCIDR(e.CIDR)))
		for _, n := range e.Ports {
			r.WithPorts(port(tcp, n))
		}
		egress = append(egress, r)
	}
	// The env's own replicas reach each other on the worker port: a
	// command that reached a replica not holding its conversation's
	// lease is passed to the holder. A pod selector without a namespace
	// selector names pods of this namespace only.
	replicas := networkingv1ac.NetworkPolicyPeer().WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(podLabels(tenant, env)))
	egress = append(egress, networkingv1ac.NetworkPolicyEgressRule().WithTo(replicas).WithPorts(port(tcp, p.o.WorkerPort)))
	return networkingv1ac.NetworkPolicy(WorkerName, ns).WithLabels(l).WithSpec(networkingv1ac.NetworkPolicySpec().
		WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(podLabels(tenant, env))).
		WithPolicyTypes(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress).
		WithIngress(
			networkingv1ac.NetworkPolicyIngressRule().WithFrom(cpPeer).WithPorts(port(tcp, p.o.WorkerPort)),
			networkingv1ac.NetworkPolicyIngressRule().WithFrom(replicas).WithPorts(port(tcp, p.o.WorkerPort))).
		WithEgress(egress...))
}

// autoscaler keeps the worker Deployment's replicas within sc's bounds at
// sc.TurnsPerReplica running turns per replica, on the replicas' own
// gauge (served to the autoscaler by a custom-metrics adapter).
func autoscaler(ns string, l map[string]string, sc store.EnvScale) *autoscalingv2ac.HorizontalPodAutoscalerApplyConfiguration {
	return autoscalingv2ac.HorizontalPodAutoscaler(WorkerName, ns).WithLabels(l).WithSpec(autoscalingv2ac.HorizontalPodAutoscalerSpec().
		WithScaleTargetRef(autoscalingv2ac.CrossVersionObjectReference().WithAPIVersion("apps/v1").WithKind("Deployment").WithName(WorkerName)).
		WithMinReplicas(int32(sc.MinReplicas)).
		WithMaxReplicas(int32(sc.MaxReplicas)).
		WithMetrics(autoscalingv2ac.MetricSpec().WithType(autoscalingv2.PodsMetricSourceType).
			WithPods(autoscalingv2ac.PodsMetricSource().
				WithMetric(autoscalingv2ac.MetricIdentifier().WithName(TurnsMetric)).
				WithTarget(autoscalingv2ac.MetricTarget().WithType(autoscalingv2.AverageValueMetricType).
					WithAverageValue(*resource.NewQuantity(int64(sc.TurnsPerReplica), resource.DecimalSI))))).
		WithBehavior(autoscalingv2ac.HorizontalPodAutoscalerBehavior().
			// Up at once (the default), down one replica a minute after
			// the window: each removed replica drains its running turns
			// and hands its conversations over before the next goes.
			WithScaleDown(autoscalingv2ac.HPAScalingRules().
				WithStabilizationWindowSeconds(scaleDownWindow).
				WithPolicies(autoscalingv2ac.HPAScalingPolicy().WithType(autoscalingv2.PodsScalingPolicy).WithValue(1).WithPeriodSeconds(60)))))
}

// disruptionBudget lets a voluntary disruption (a node's drain, a cluster
// upgrade) evict one worker replica at a time. maxUnavailable 1 rather
// than minAvailable: with minAvailable 1, an env of one replica would
// never allow an eviction and would block every drain of its node until
// someone deleted the pod by hand. Evicting it leaves the env without a
// worker until the replacement is ready, which the worker's drain
// (running turns finish, idle conversations handed over through the
// lease) and the clients' retries bridge. With several replicas, the others keep serving while
// one moves. A replica that is not ready may always be evicted: it
// serves nothing, and waiting for it would block the drain just the same.
func disruptionBudget(tenant, env, ns string, l map[string]string) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	return policyv1ac.PodDisruptionBudget(WorkerName, ns).WithLabels(l).WithSpec(policyv1ac.PodDisruptionBudgetSpec().
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(podLabels(tenant, env))).
		WithMaxUnavailable(intstr.FromInt32(1)).
		WithUnhealthyPodEvictionPolicy(policyv1.AlwaysAllow))
}

// secret is the token Secret's apply configuration for ws; resourceVersion,
// when set, makes the apply fail if the Secret changed since it was read.
func secret(ws provision.WorkerSecret, resourceVersion string) *corev1ac.SecretApplyConfiguration {
	l := labels(ws.Tenant, ws.Env)
	a := map[string]string{provision.AnnotationTokenID: ws.IdentityTokenID}
	if !ws.ExpiresAt.IsZero() {
		a[provision.AnnotationTokenExpiry] = ws.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z")
	}
	data := map[string][]byte{}
	for k, v := range ws.Data() {
		data[k] = []byte(v)
	}
	s := corev1ac.Secret(SecretName, ws.Namespace).WithLabels(l).WithAnnotations(a).
		WithType(corev1.SecretTypeOpaque).WithData(data)
	if resourceVersion != "" {
		s.WithResourceVersion(resourceVersion)
	}
	return s
}
