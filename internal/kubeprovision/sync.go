package kubeprovision

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"

	"github.com/talkide/platform/internal/provision"
	"github.com/talkide/platform/internal/store"
)

// Action says what a sync did to one object.
type Action string

// Actions.
const (
	Created   Action = "created"
	Updated   Action = "updated"
	Unchanged Action = "unchanged"
	Deleted   Action = "deleted"
	Absent    Action = "absent" // nothing to delete
	Kept      Action = "kept"
)

// Change is what happened to one object.
type Change struct {
	Kind   string // e.g. "Deployment"
	Name   string // namespace/name, or name for cluster-scoped objects
	Action Action
}

// Rotation describes an identity token rotation.
type Rotation struct {
	Reason    string    // why: no Secret, expiring, asked, not valid
	NewID     string    // the token now in the Secret
	ExpiresAt time.Time // the new token's expiry
	OldID     string    // the token it replaced, "" when none was valid
	// OldUntil is when the old token stops being accepted (the end of the
	// grace period); zero when there is no old token.
	OldUntil time.Time
}

// Result is what one Sync did.
type Result struct {
	Tenant, Env, Namespace string
	WorkerURL              string
	Changes                []Change
	Rotation               *Rotation // nil when the token was kept
}

// Changed reports whether the sync changed anything.
func (r Result) Changed() bool {
	for _, c := range r.Changes {
		if c.Action != Unchanged && c.Action != Absent && c.Action != Kept {
			return true
		}
	}
	return r.Rotation != nil
}

// SyncOptions change one Sync.
type SyncOptions struct {
	// Rotate issues a new identity token even when the current one is
	// good.
	Rotate bool
	// Grace overrides Options.Grace for this rotation; 0 keeps it.
	Grace time.Duration
}

// Sync makes the cluster hold exactly what tenant/env needs, once, and
// returns what it changed. Every object is applied whole with Force, so a
// field another manager changed is taken back while fields only others set
// stay. ErrRetired for a retired env; store.ErrNotFound for an unknown one.
func (p *Provisioner) Sync(ctx context.Context, tenant, env string, so *SyncOptions) (Result, error) {
	var opt SyncOptions
	if so != nil {
		opt = *so
	}
	e, err := p.st.GetEnv(ctx, tenant, env)
	if err != nil {
		return Result{}, fmt.Errorf("kubeprovision: %w", err)
	}
	if !e.RetiredAt.IsZero() {
		return Result{}, fmt.Errorf("kubeprovision: %s/%s: %w (since %s; talkide admin env add makes it live again)", tenant, env, ErrRetired, e.RetiredAt.Format(time.RFC3339))
	}
	o := p.objects(tenant, env, e.Scale)
	res := Result{Tenant: tenant, Env: env, Namespace: o.ns, WorkerURL: p.WorkerURL(tenant, env)}
	for _, s := range p.steps(o) {
		name := s.name
		if s.kind != "Namespace" {
			name = o.ns + "/" + s.name
		}
		if s.get == nil {
			act, rot, err := p.tokenSecret(ctx, tenant, env, o.ns, opt)
			if err != nil {
				return res, err
			}
			res.Changes = append(res.Changes, Change{Kind: s.kind, Name: name, Action: act})
			res.Rotation = rot
			continue
		}
		var before kubeObject
		if cur, err := s.get(ctx); err == nil {
			before = cur
		} else if !apierrors.IsNotFound(err) {
			return res, fmt.Errorf("kubeprovision: get %s %s: %w", s.kind, name, err)
		}
		if s.apply == nil {
			// Not wanted (an autoscaler of an env back at a fixed count).
			act := Absent
			if before != nil {
				if err := s.remove(ctx); err != nil && !apierrors.IsNotFound(err) {
					return res, fmt.Errorf("kubeprovision: delete %s %s: %w", s.kind, name, err)
				}
				act = Deleted
			}
			res.Changes = append(res.Changes, Change{Kind: s.kind, Name: name, Action: act})
			continue
		}
		after, err := s.apply(ctx)
		if err != nil {
			return res, fmt.Errorf("kubeprovision: apply %s %s: %w", s.kind, name, err)
		}
		res.Changes = append(res.Changes, Change{Kind: s.kind, Name: name, Action: changeOf(before, after)})
	}
	// The control-plane reaches the worker through its Service.
	if e.WorkerURL != res.WorkerURL {
		if _, err := provision.EnsureEnv(ctx, p.st, tenant, env, res.WorkerURL); err != nil {
			return res, fmt.Errorf("kubeprovision: record the worker URL: %w", err)
		}
		res.Changes = append(res.Changes, Change{Kind: "WorkerURL", Name: res.WorkerURL, Action: Updated})
	}
	p.log.Info("synced tenant-env", "tenant", tenant, "env", env, "changed", res.Changed(), "rotated", res.Rotation != nil)
	return res, nil
}

// step is one object of a sync: get reads it, apply applies it; the token
// Secret's step has neither (tokenSecret does it), and an object the env
// must not have has no apply and is removed when it exists.
type step struct {
	kind, name string
	get, apply func(context.Context) (kubeObject, error)
	remove     func(context.Context) error
}

// steps are the objects of o in the order Sync applies them. The
// autoscaler comes before the Deployment, so that an env going back to a
// fixed count loses its autoscaler before the Deployment's replicas are
// set, and no autoscaler changes them after.
func (p *Provisioner) steps(o envObjects) []step {
	apply := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	del := metav1.DeleteOptions{}
	core, rbac := p.cs.CoreV1(), p.cs.RbacV1()
	hpas := p.cs.AutoscalingV2().HorizontalPodAutoscalers(o.ns)
	deps := p.cs.AppsV1().Deployments(o.ns)
	autoscaler := step{"HorizontalPodAutoscaler", WorkerName,
		func(ctx context.Context) (kubeObject, error) { return hpas.Get(ctx, WorkerName, metav1.GetOptions{}) },
		nil,
		func(ctx context.Context) error { return hpas.Delete(ctx, WorkerName, del) }}
	if o.autoscaler != nil {
		autoscaler.apply = func(ctx context.Context) (kubeObject, error) { return hpas.Apply(ctx, o.autoscaler, apply) }
	}
	return []step{
		applied("Namespace", o.ns, core.Namespaces(), o.namespace, apply),
		applied("ServiceAccount", WorkerName, core.ServiceAccounts(o.ns), o.serviceAccount, apply),
		applied("Role", WorkerName, rbac.Roles(o.ns), o.role, apply),
		applied("RoleBinding", WorkerName, rbac.RoleBindings(o.ns), o.roleBinding, apply),
		{"Secret", SecretName, nil, nil, nil}, // tokenSecret
		applied("PersistentVolumeClaim", SessionsClaim, core.PersistentVolumeClaims(o.ns), o.claim, apply),
		autoscaler,
		{"Deployment", WorkerName,
			func(ctx context.Context) (kubeObject, error) { return deps.Get(ctx, WorkerName, metav1.GetOptions{}) },
			func(ctx context.Context) (kubeObject, error) { return p.applyDeployment(ctx, o) }, nil},
		applied("PodDisruptionBudget", WorkerName, p.cs.PolicyV1().PodDisruptionBudgets(o.ns), o.disruptionBudget, apply),
		applied("Service", WorkerName, core.Services(o.ns), o.service, apply),
		applied("NetworkPolicy", WorkerName, p.cs.NetworkingV1().NetworkPolicies(o.ns), o.networkPolicy, apply),
	}
}

// getApplier is the part of a typed client that a step of a kept object
// uses: T is the object, C its apply configuration.
type getApplier[T kubeObject, C any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Apply(ctx context.Context, cfg C, opts metav1.ApplyOptions) (T, error)
}

// applied is the step that reads the object name through c and applies
// cfg with opts; it never removes the object.
func applied[T kubeObject, C any](kind, name string, c getApplier[T, C], cfg C, opts metav1.ApplyOptions) step {
	return step{kind, name,
		func(ctx context.Context) (kubeObject, error) { return c.Get(ctx, name, metav1.GetOptions{}) },
		func(ctx context.Context) (kubeObject, error) { return c.Apply(ctx, cfg, opts) },
		nil}
}

// applyDeployment applies the worker Deployment. At a fixed count its
// replicas are that count. Under an autoscaler they are the Deployment's
// current replicas clamped to the bounds: the autoscaler changes them
// through the scale subresource, and an apply that left them out would
// not leave them alone (while this manager owns the field, omitting it
// removes it, and the server defaults it to 1). The read count is
// guarded by its resourceVersion, so a count the autoscaler set between
// the read and the apply is read again rather than overwritten.
func (p *Provisioner) applyDeployment(ctx context.Context, o envObjects) (kubeObject, error) {
	deps := p.cs.AppsV1().Deployments(o.ns)
	apply := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	if o.autoscaler == nil {
		return deps.Apply(ctx, o.deployment, apply)
	}
	var after kubeObject
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		// o is this sync's own: its Deployment is changed in place.
		d := o.deployment
		d.ResourceVersion = nil
		replicas := int32(o.scale.MinReplicas)
		cur, err := deps.Get(ctx, WorkerName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return err
		default:
			if cur.Spec.Replicas != nil {
				replicas = clamp(*cur.Spec.Replicas, int32(o.scale.MinReplicas), int32(o.scale.MaxReplicas))
			}
			d.WithResourceVersion(cur.ResourceVersion)
		}
		d.Spec.WithReplicas(replicas)
		a, err := deps.Apply(ctx, d, apply)
		if err == nil {
			after = a
		}
		return err
	})
	return after, err
}

func clamp(n, lo, hi int32) int32 { return max(lo, min(n, hi)) }

// kubeObject is what the typed clients return.
type kubeObject interface {
	metav1.Object
	runtime.Object
}

// changeOf compares an object before and after an apply by content, not
// by resourceVersion: the server sometimes writes an object without
// changing it (a claim's first apply after its creation does).
func changeOf(before, after kubeObject) Action {
	if before == nil {
		return Created
	}
	if equality.Semantic.DeepEqual(stripped(before), stripped(after)) {
		return Unchanged
	}
	return Updated
}

// stripped is a copy of o without what changes on every write.
func stripped(o kubeObject) runtime.Object {
	c := o.DeepCopyObject()
	m := c.(metav1.Object)
	m.SetResourceVersion("")
	mf := m.GetManagedFields()
	for i := range mf {
		mf[i].Time = nil
	}
	m.SetManagedFields(mf)
	return c
}

// tokenSecret keeps the token Secret valid: it re-applies the token it
// holds while that is good for longer than the lead time, and otherwise
// (or when asked) issues a new one, writes it, and lets the old one live
// for the grace period.
func (p *Provisioner) tokenSecret(ctx context.Context, tenant, env, ns string, opt SyncOptions) (Action, *Rotation, error) {
	now := p.o.Now()
	secrets := p.cs.CoreV1().Secrets(ns)
	cur, err := secrets.Get(ctx, SecretName, metav1.GetOptions{})
	var (
		before kubeObject
		rv     string
		keep   *store.IdentityToken
		token  string
		reason string
	)
	switch {
	case apierrors.IsNotFound(err):
		reason = "no Secret yet"
	case err != nil:
		return "", nil, fmt.Errorf("kubeprovision: get Secret %s/%s: %w", ns, SecretName, err)
	default:
		before, rv = cur, cur.ResourceVersion
		token = strings.TrimSpace(string(cur.Data[provision.KeyIdentityToken]))
		rec, aerr := provision.Authenticate(ctx, p.st, token, now)
		switch {
		case errors.Is(aerr, provision.ErrInvalidToken):
			reason = "the Secret's token is not valid"
		case aerr != nil:
			return "", nil, fmt.Errorf("kubeprovision: %w", aerr)
		case rec.Tenant != tenant || rec.Env != env:
			reason = "the Secret holds another tenant-env's token"
		case !rec.RevokedAt.IsZero():
			reason = "the Secret's token is being revoked"
			keep = &rec
		case !rec.ExpiresAt.After(now.Add(p.o.RotateBefore)):
			reason = "the token expires within the lead time"
			keep = &rec
		case opt.Rotate:
			reason = "rotation asked"
			keep = &rec
		default:
			ck := p.commandKey()
			ws := provision.NewWorkerSecret(ck.Secret, ck.ID, tenant, env, token)
			ws.ExpiresAt = rec.ExpiresAt
			after, err := secrets.Apply(ctx, secret(ws, ""), metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
			if err != nil {
				return "", nil, fmt.Errorf("kubeprovision: apply Secret %s/%s: %w", ns, SecretName, err)
			}
			return changeOf(before, after), nil, nil
		}
	}

	newTok, rec, err := provision.IssueIdentityToken(ctx, p.st, tenant, env, p.o.TokenTTL, now)
	if err != nil {
		return "", nil, fmt.Errorf("kubeprovision: %w", err)
	}
	ck := p.commandKey()
	ws := provision.NewWorkerSecret(ck.Secret, ck.ID, tenant, env, newTok)
	ws.ExpiresAt = rec.ExpiresAt
	// The read version guards the write: two rotations at once must not
	// both believe their token is the one in the Secret.
	after, err := secrets.Apply(ctx, secret(ws, rv), metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	if err != nil {
		// The new token reached no Secret: it must not stay valid.
		if _, rerr := provision.RevokeIdentityToken(context.WithoutCancel(ctx), p.st, rec.ID, now); rerr != nil {
			err = errors.Join(err, rerr)
		}
		if apierrors.IsConflict(err) {
			return "", nil, fmt.Errorf("kubeprovision: %s/%s: %w", tenant, env, ErrConflict)
		}
		return "", nil, fmt.Errorf("kubeprovision: apply Secret %s/%s: %w", ns, SecretName, err)
	}
	rot := &Rotation{Reason: reason, NewID: rec.ID, ExpiresAt: rec.ExpiresAt}
	if keep != nil {
		grace := p.o.Grace
		if opt.Grace > 0 {
			grace = opt.Grace
		}
		old, err := provision.RevokeIdentityToken(ctx, p.st, keep.ID, now.Add(grace))
		if err != nil {
			return "", nil, fmt.Errorf("kubeprovision: end the old token's life: %w", err)
		}
		rot.OldID, rot.OldUntil = old.ID, old.RevokedAt
	}
	p.log.Info("rotated identity token", "tenant", tenant, "env", env, "reason", reason,
		"token_id", rot.NewID, "old_token_id", rot.OldID, "old_valid_until", rot.OldUntil)
	return changeOf(before, after), rot, nil
}

// secretKeys are the files a worker reads from the mounted Secret.
var secretKeys = []string{provision.KeyIdentityToken, provision.KeyCommandKey, provision.KeyCommandKeyID}

// secretComplete reports whether s has every key the worker reads.
func secretComplete(s *corev1.Secret) bool {
	for _, k := range secretKeys {
		if len(s.Data[k]) == 0 {
			return false
		}
	}
	return true
}
