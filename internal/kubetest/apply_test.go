package kubetest

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	autoscalingv2ac "k8s.io/client-go/applyconfigurations/autoscaling/v2"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
)

// Every kind a tenant-env's provisioning applies goes through server-side
// apply here with its typed apply configuration, and records the field
// manager: the server validates and stores them, though no controller acts
// on them (no pods for the Deployment, the claim stays Pending, the policy
// is not enforced).
func TestApplyProvisionerKinds(t *testing.T) {
	srv := Start(t)
	admin := srv.Client(t)
	const manager = "talkide-provisioner"
	opts := metav1.ApplyOptions{FieldManager: manager, Force: true}
	nsName := uniqueName("tenant-env")
	labels := map[string]string{"app.kubernetes.io/managed-by": "talkide"}

	tests := []struct {
		kind  string
		apply func(ctx context.Context, cs *kubernetes.Clientset) (metav1.Object, error)
	}{
		{"Namespace", func(ctx context.Context, cs *kubernetes.Clientset) (metav1.Object, error) {
			return cs.CoreV1().Namespaces().Apply(ctx, corev1ac.Namespace(nsName).WithLabels(labels), opts)
		}},
		{"ServiceAccount", func(ctx context.Context, cs *kubernetes.Clientset) (metav1.Object, error) {
			return cs.CoreV1().ServiceAccounts(nsName).Apply(ctx, corev1ac.ServiceAccount("worker", nsName).WithLabels(labels), opts)
		}},
		{"Role", func(ctx context.Context, cs *kubernetes.Clientset) (metav1.Object, error) {
			return cs.RbacV1().Roles(nsName).Apply(ctx, rbacv1ac.Role("builds", nsName).WithRules(
				rbacv1ac.PolicyRule().WithAPIGroups("batch").WithResources("jobs").WithVerbs("create", "get", "list", "watch", "delete"),
				rbacv1ac.PolicyRule().WithAPIGroups("").WithResources("pods", "pods/log").WithVerbs("get", "list", "watch"),
			), opts)
		}},
		{"RoleBinding", func(ctx context.Context, cs *kubernetes.Clientset) (metav1.Object, error) {
			return cs.RbacV1().RoleBindings(nsName).Apply(ctx, rbacv1ac.RoleBinding("worker-builds", nsName).
				WithSubjects(rbacv1ac.Subject().WithKind(rbacv1.ServiceAccountKind).WithName("worker").WithNamespace(nsName)).
				WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("Role").WithName("builds")), opts)
		}},
		{"Secret", func(ctx context.Context, cs *kubernetes.Clientset) (metav1.Object, error) {
			return cs.CoreV1().Secrets(nsName).Apply(ctx, corev1ac.Secret("talkide-worker-token", nsName).
				WithType(corev1.SecretTypeOpaque).WithStringData(map[string]string{"identity-token": "not-a-real-token"}), opts)
		}},
		{"PersistentVolumeClaim", func(ctx context.Context, cs *kubernetes.Clientset) (metav1.Object, error) {
			return cs.CoreV1().PersistentVolumeClaims(nsName).Apply(ctx, corev1ac.PersistentVolumeClaim("workspace", nsName).
				WithSpec(corev1ac.PersistentVolumeClaimSpec().
					WithAccessModes(corev1.ReadWriteOnce).
					WithResources(corev1ac.VolumeResourceRequirements().WithRequests(corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}))), opts)
		}},
		{"Deployment", func(ctx context.Context, cs *kubernetes.Clientset) (metav1.Object, error) {
			return cs.AppsV1().Deployments(nsName).Apply(ctx, appsv1ac.Deployment("worker", nsName).
				WithSpec(appsv1ac.DeploymentSpec().
					WithReplicas(1).
					WithStrategy(appsv1ac.DeploymentStrategy().WithType(appsv1.RecreateDeploymentStrategyType)).
					WithSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{"app": "worker"})).
					WithTemplate(corev1ac.PodTemplateSpec().
						WithLabels(map[string]string{"app": "worker"}).
						WithSpec(corev1ac.PodSpec().
							WithServiceAccountName("worker").
							WithContainers(corev1ac.Container().WithName("worker").WithImage("talkide:test").
								WithPorts(corev1ac.ContainerPort().WithName("http").WithContainerPort(8080)))))), opts)
		}},
		{"Service", func(ctx context.Context, cs *kubernetes.Clientset) (metav1.Object, error) {
			return cs.CoreV1().Services(nsName).Apply(ctx, corev1ac.Service("worker", nsName).
				WithSpec(corev1ac.ServiceSpec().
					WithSelector(map[string]string{"app": "worker"}).
					WithPorts(corev1ac.ServicePort().WithName("http").WithPort(80).WithTargetPort(intstr.FromString("http")))), opts)
		}},
		{"HorizontalPodAutoscaler", func(ctx context.Context, cs *kubernetes.Clientset) (metav1.Object, error) {
			return cs.AutoscalingV2().HorizontalPodAutoscalers(nsName).Apply(ctx, autoscalingv2ac.HorizontalPodAutoscaler("worker", nsName).
				WithSpec(autoscalingv2ac.HorizontalPodAutoscalerSpec().
					WithScaleTargetRef(autoscalingv2ac.CrossVersionObjectReference().WithAPIVersion("apps/v1").WithKind("Deployment").WithName("worker")).
					WithMinReplicas(1).WithMaxReplicas(3).
					WithMetrics(autoscalingv2ac.MetricSpec().WithType(autoscalingv2.PodsMetricSourceType).
						WithPods(autoscalingv2ac.PodsMetricSource().
							WithMetric(autoscalingv2ac.MetricIdentifier().WithName("turns_running")).
							WithTarget(autoscalingv2ac.MetricTarget().WithType(autoscalingv2.AverageValueMetricType).WithAverageValue(resource.MustParse("8")))))), opts)
		}},
		{"PodDisruptionBudget", func(ctx context.Context, cs *kubernetes.Clientset) (metav1.Object, error) {
			return cs.PolicyV1().PodDisruptionBudgets(nsName).Apply(ctx, policyv1ac.PodDisruptionBudget("worker", nsName).
				WithSpec(policyv1ac.PodDisruptionBudgetSpec().
					WithSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{"app": "worker"})).
					WithMaxUnavailable(intstr.FromInt32(1))), opts)
		}},
		{"NetworkPolicy", func(ctx context.Context, cs *kubernetes.Clientset) (metav1.Object, error) {
			return cs.NetworkingV1().NetworkPolicies(nsName).Apply(ctx, networkingv1ac.NetworkPolicy("default-deny", nsName).
				WithSpec(networkingv1ac.NetworkPolicySpec().
					WithPodSelector(metav1ac.LabelSelector()).
					WithPolicyTypes("Ingress", "Egress")), opts)
		}},
	}
	// In order, not in parallel: the Namespace comes first.
	for _, tc := range tests {
		t.Run(tc.kind, func(t *testing.T) {
			obj, err := tc.apply(t.Context(), admin)
			if err != nil {
				t.Fatalf("apply %s: %v", tc.kind, err)
			}
			if !managedBy(obj, manager) {
				t.Errorf("%s's managedFields have no apply by %s: %+v", tc.kind, manager, obj.GetManagedFields())
			}
			// Applying the same configuration again changes nothing, at the
			// latest from the third apply on: a PersistentVolumeClaim's
			// first re-apply writes it once more on this server (seen with
			// 1.37.2, with no visible change), which a provisioner that
			// counts writes must allow for.
			var rvs []string
			for range 2 {
				again, err := tc.apply(t.Context(), admin)
				if err != nil {
					t.Fatalf("apply %s again: %v", tc.kind, err)
				}
				rvs = append(rvs, again.GetResourceVersion())
			}
			if rvs[0] != rvs[1] || (tc.kind != "PersistentVolumeClaim" && rvs[0] != obj.GetResourceVersion()) {
				t.Errorf("applying the same %s again changed its resourceVersion: %s, then %v", tc.kind, obj.GetResourceVersion(), rvs)
			}
		})
	}

	svc, err := admin.CoreV1().Services(nsName).Get(t.Context(), "worker", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Service: %v", err)
	}
	if svc.Spec.ClusterIP == "" {
		t.Error("the Service got no cluster IP")
	}
	pvc, err := admin.CoreV1().PersistentVolumeClaims(nsName).Get(t.Context(), "workspace", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get PersistentVolumeClaim: %v", err)
	}
	if pvc.Status.Phase != corev1.ClaimPending && pvc.Status.Phase != "" {
		t.Errorf("the claim is %s with no volume controller running", pvc.Status.Phase)
	}
}

// RBAC refuses to let a user grant what it does not hold: a provisioner
// that writes Roles needs their permissions itself, or escalate and bind.
func TestRoleEscalation(t *testing.T) {
	srv := Start(t)
	ns := srv.Namespace(t)
	writeRBAC := rbacv1.PolicyRule{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles", "rolebindings"}, Verbs: []string{"create", "get"}}
	readSecrets := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}
	escalate := rbacv1.PolicyRule{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles"}, Verbs: []string{"escalate"}}
	tests := map[string]struct {
		rules   []rbacv1.PolicyRule
		allowed bool
	}{
		"may only write roles":    {[]rbacv1.PolicyRule{writeRBAC}, false},
		"holds what it grants":    {[]rbacv1.PolicyRule{writeRBAC, readSecrets}, true},
		"may escalate":            {[]rbacv1.PolicyRule{writeRBAC, escalate}, true},
		"holds it, may not write": {[]rbacv1.PolicyRule{readSecrets}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			u := srv.User(t, &UserOptions{Name: "provisioner", Rules: tc.rules})
			role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: u.Name}, Rules: []rbacv1.PolicyRule{readSecrets}}
			_, err := NewClient(t, u.Config).RbacV1().Roles(ns).Create(t.Context(), role, metav1.CreateOptions{})
			switch {
			case tc.allowed && err != nil:
				t.Errorf("create Role: %v", err)
			case !tc.allowed && !apierrors.IsForbidden(err):
				t.Errorf("create Role: err = %v, want forbidden", err)
			}
		})
	}
}

func managedBy(obj metav1.Object, manager string) bool {
	for _, mf := range obj.GetManagedFields() {
		if mf.Manager == manager && mf.Operation == metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	return false
}
