package kubeprovision

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talkide/platform/internal/provision"
)

// DeleteOptions change Delete.
type DeleteOptions struct {
	// KeepSessions deletes everything but the namespace and its session
	// claim, so adding the env again re-attaches its sessions.
	KeepSessions bool
}

// DeleteResult is what Delete did.
type DeleteResult struct {
	Namespace string
	Revoked   []string // ids of the identity tokens revoked
	Changes   []Change
}

// Delete retires tenant/env: first, in the store, it marks the env retired
// (so no reconciler brings it back) and revokes every identity token of the
// env, so the worker can mint nothing more even if the deletion below
// fails half-way; then it deletes the namespace, or with KeepSessions every
// object but the namespace and the session claim. Deletion is
// asynchronous: the namespace stays Terminating until its contents are
// gone (docs/operations.md for one that stays so).
func (p *Provisioner) Delete(ctx context.Context, tenant, env string, do *DeleteOptions) (DeleteResult, error) {
	var opt DeleteOptions
	if do != nil {
		opt = *do
	}
	ns := provision.Namespace(tenant, env)
	res := DeleteResult{Namespace: ns}
	revoked, err := provision.RetireEnv(ctx, p.st, tenant, env, p.o.Now())
	res.Revoked = revoked
	if err != nil {
		return res, err
	}
	p.log.Info("retired tenant-env", "tenant", tenant, "env", env, "revoked_tokens", len(revoked))

	background := metav1.DeletePropagationBackground
	del := metav1.DeleteOptions{PropagationPolicy: &background}
	if !opt.KeepSessions {
		err := p.cs.CoreV1().Namespaces().Delete(ctx, ns, del)
		act := Deleted
		if apierrors.IsNotFound(err) {
			act, err = Absent, nil
		}
		if err != nil {
			return res, fmt.Errorf("kubeprovision: delete namespace %s: %w", ns, err)
		}
		res.Changes = append(res.Changes, Change{Kind: "Namespace", Name: ns, Action: act})
		return res, nil
	}
	core, rbac := p.cs.CoreV1(), p.cs.RbacV1()
	// The autoscaler before the pods it would scale, the pods before
	// what they use.
	steps := []struct {
		kind, name string
		del        func(context.Context) error
	}{
		{"HorizontalPodAutoscaler", WorkerName, func(ctx context.Context) error {
			return p.cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Delete(ctx, WorkerName, del)
		}},
		{"Deployment", WorkerName, func(ctx context.Context) error {
			return p.cs.AppsV1().Deployments(ns).Delete(ctx, WorkerName, del)
		}},
		{"PodDisruptionBudget", WorkerName, func(ctx context.Context) error {
			return p.cs.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, WorkerName, del)
		}},
		{"Service", WorkerName, func(ctx context.Context) error { return core.Services(ns).Delete(ctx, WorkerName, del) }},
		{"NetworkPolicy", WorkerName, func(ctx context.Context) error {
			return p.cs.NetworkingV1().NetworkPolicies(ns).Delete(ctx, WorkerName, del)
		}},
		{"Secret", SecretName, func(ctx context.Context) error { return core.Secrets(ns).Delete(ctx, SecretName, del) }},
		{"RoleBinding", WorkerName, func(ctx context.Context) error { return rbac.RoleBindings(ns).Delete(ctx, WorkerName, del) }},
		{"Role", WorkerName, func(ctx context.Context) error { return rbac.Roles(ns).Delete(ctx, WorkerName, del) }},
		{"ServiceAccount", WorkerName, func(ctx context.Context) error {
			return core.ServiceAccounts(ns).Delete(ctx, WorkerName, del)
		}},
	}
	var errs []error
	for _, s := range steps {
		err := s.del(ctx)
		act := Deleted
		if apierrors.IsNotFound(err) {
			act, err = Absent, nil
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("kubeprovision: delete %s %s/%s: %w", s.kind, ns, s.name, err))
			continue
		}
		res.Changes = append(res.Changes, Change{Kind: s.kind, Name: ns + "/" + s.name, Action: act})
	}
	res.Changes = append(res.Changes,
		Change{Kind: "PersistentVolumeClaim", Name: ns + "/" + SessionsClaim, Action: Kept},
		Change{Kind: "Namespace", Name: ns, Action: Kept})
	return res, errors.Join(errs...)
}
