package kubeprovision

import (
	"context"
	"fmt"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talkide/platform/internal/provision"
	"github.com/talkide/platform/internal/store"
)

// ObjectStatus is one object of a tenant-env as the cluster has it.
type ObjectStatus struct {
	Kind, Name string
	Exists     bool
	Detail     string // phase, readiness or token id; never a secret
}

// Status is a tenant-env's objects and whether its worker is ready.
type Status struct {
	Tenant, Env, Namespace string
	Retired                bool
	Objects                []ObjectStatus
	// Ready: the Deployment has every replica updated and ready (the
	// worker's /readyz: session volume writable, token readable,
	// control-plane reachable).
	Ready bool
	// Scale is the env's scale as the store has it, resolved.
	Scale store.EnvScale
	// DesiredReplicas and ReadyReplicas are the Deployment's (0 when it
	// does not exist).
	DesiredReplicas, ReadyReplicas int32
	// Autoscaler is the autoscaler's state in a line ("" without one):
	// its bounds, its current and desired replicas, and what its
	// conditions report when one is not true (no metric, say).
	Autoscaler string
}

// Status reads the objects of tenant/env.
func (p *Provisioner) Status(ctx context.Context, tenant, env string) (Status, error) {
	e, err := p.st.GetEnv(ctx, tenant, env)
	if err != nil {
		return Status{}, fmt.Errorf("kubeprovision: %w", err)
	}
	ns := provision.Namespace(tenant, env)
	st := Status{Tenant: tenant, Env: env, Namespace: ns, Retired: !e.RetiredAt.IsZero(), Scale: e.Scale.Resolved()}
	get := metav1.GetOptions{}
	core := p.cs.CoreV1()
	add := func(kind, name string, err error, detail func() string) error {
		os := ObjectStatus{Kind: kind, Name: name}
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("kubeprovision: get %s %s: %w", kind, name, err)
		default:
			os.Exists, os.Detail = true, detail()
		}
		st.Objects = append(st.Objects, os)
		return nil
	}
	nsObj, err := core.Namespaces().Get(ctx, ns, get)
	if err := add("Namespace", ns, err, func() string { return string(nsObj.Status.Phase) }); err != nil {
		return st, err
	}
	_, err = core.ServiceAccounts(ns).Get(ctx, WorkerName, get)
	if err := add("ServiceAccount", ns+"/"+WorkerName, err, func() string { return "" }); err != nil {
		return st, err
	}
	_, err = p.cs.RbacV1().Roles(ns).Get(ctx, WorkerName, get)
	if err := add("Role", ns+"/"+WorkerName, err, func() string { return "" }); err != nil {
		return st, err
	}
	_, err = p.cs.RbacV1().RoleBindings(ns).Get(ctx, WorkerName, get)
	if err := add("RoleBinding", ns+"/"+WorkerName, err, func() string { return "" }); err != nil {
		return st, err
	}
	sec, err := core.Secrets(ns).Get(ctx, SecretName, get)
	if err := add("Secret", ns+"/"+SecretName, err, func() string {
		d := "identity token " + sec.Annotations[provision.AnnotationTokenID]
		if exp := sec.Annotations[provision.AnnotationTokenExpiry]; exp != "" {
			d += ", expires " + exp
		}
		if !secretComplete(sec) {
			d += ", INCOMPLETE"
		}
		return d
	}); err != nil {
		return st, err
	}
	pvc, err := core.PersistentVolumeClaims(ns).Get(ctx, SessionsClaim, get)
	if err := add("PersistentVolumeClaim", ns+"/"+SessionsClaim, err, func() string { return string(pvc.Status.Phase) }); err != nil {
		return st, err
	}
	dep, err := p.cs.AppsV1().Deployments(ns).Get(ctx, WorkerName, get)
	if err := add("Deployment", ns+"/"+WorkerName, err, func() string {
		want := int32(1)
		if dep.Spec.Replicas != nil {
			want = *dep.Spec.Replicas
		}
		s := dep.Status
		st.Ready = dep.Status.ObservedGeneration >= dep.Generation && s.UpdatedReplicas >= want && s.ReadyReplicas >= want && s.AvailableReplicas >= want
		st.DesiredReplicas, st.ReadyReplicas = want, s.ReadyReplicas
		return fmt.Sprintf("%d/%d ready, %d updated", s.ReadyReplicas, want, s.UpdatedReplicas)
	}); err != nil {
		return st, err
	}
	hpa, err := p.cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, WorkerName, get)
	if err := add("HorizontalPodAutoscaler", ns+"/"+WorkerName, err, func() string {
		st.Autoscaler = autoscalerState(hpa)
		return st.Autoscaler
	}); err != nil {
		return st, err
	}
	pdb, err := p.cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, WorkerName, get)
	if err := add("PodDisruptionBudget", ns+"/"+WorkerName, err, func() string {
		return fmt.Sprintf("%d disruption(s) allowed", pdb.Status.DisruptionsAllowed)
	}); err != nil {
		return st, err
	}
	_, err = core.Services(ns).Get(ctx, WorkerName, get)
	if err := add("Service", ns+"/"+WorkerName, err, func() string { return p.WorkerURL(tenant, env) }); err != nil {
		return st, err
	}
	_, err = p.cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, WorkerName, get)
	if err := add("NetworkPolicy", ns+"/"+WorkerName, err, func() string { return "" }); err != nil {
		return st, err
	}
	return st, nil
}

// autoscalerState says in a line what the autoscaler h does: its bounds,
// the replicas it has and wants, and each condition that says something
// is wrong or bounded (AbleToScale or ScalingActive not true, ScalingLimited
// true), with its reason (FailedGetPodsMetric when no adapter serves the
// metric) and message.
func autoscalerState(h *autoscalingv2.HorizontalPodAutoscaler) string {
	lo := int32(1)
	if h.Spec.MinReplicas != nil {
		lo = *h.Spec.MinReplicas
	}
	s := fmt.Sprintf("%d-%d replicas, current %d, desired %d", lo, h.Spec.MaxReplicas, h.Status.CurrentReplicas, h.Status.DesiredReplicas)
	for _, c := range h.Status.Conditions {
		limited := c.Type == autoscalingv2.ScalingLimited
		if (c.Status == corev1.ConditionTrue) == limited {
			s += fmt.Sprintf("; %s %s: %s: %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return s
}
