package kubeprovision

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/talkide/platform/internal/store"
)

// An env's scale, as the shipped ClusterRole: a fixed count is the
// Deployment's replicas with no autoscaler; a range is an autoscaler on
// the running-turns gauge, whose count (set through the scale
// subresource by another manager) the syncs keep within the bounds rather
// than fight; back at a fixed count the autoscaler is gone.
func TestScale(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	admin := f.srv.Client(t)
	p := f.provisioner(shippedClient(t, f.srv), nil)
	deps := admin.AppsV1().Deployments(f.ns)
	hpas := admin.AutoscalingV2().HorizontalPodAutoscalers(f.ns)

	setScale := func(sc store.EnvScale) {
		t.Helper()
		if err := f.st.SetEnvScale(ctx, f.tenant, f.env, sc); err != nil {
			t.Fatal(err)
		}
	}
	replicas := func() int32 {
		t.Helper()
		d, err := deps.Get(ctx, WorkerName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return *d.Spec.Replicas
	}
	// scaleAs sets the Deployment's replicas through its scale
	// subresource as the autoscaler's controller does, under its own
	// field manager.
	scaleAs := func(n int) {
		t.Helper()
		patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n)
		if _, err := deps.Patch(ctx, WorkerName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "horizontal-pod-autoscaler"}, "scale"); err != nil {
			t.Fatal(err)
		}
	}

	// Fixed at 3.
	setScale(store.EnvScale{MinReplicas: 3, MaxReplicas: 3})
	if a := actions(f.sync(t, p)); a["HorizontalPodAutoscaler"] != Absent || a["PodDisruptionBudget"] != Created {
		t.Errorf("first sync at 3 replicas: %v", a)
	}
	if got := replicas(); got != 3 {
		t.Errorf("fixed at 3: the Deployment has %d replicas", got)
	}
	if _, err := hpas.Get(ctx, WorkerName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("fixed at 3: autoscaler %v, want none", err)
	}
	if _, err := admin.PolicyV1().PodDisruptionBudgets(f.ns).Get(ctx, WorkerName, metav1.GetOptions{}); err != nil {
		t.Errorf("fixed at 3: PodDisruptionBudget: %v", err)
	}

	// Autoscaled between 2 and 5, 4 running turns a replica.
	setScale(store.EnvScale{MinReplicas: 2, MaxReplicas: 5, TurnsPerReplica: 4})
	if a := actions(f.sync(t, p)); a["HorizontalPodAutoscaler"] != Created || a["Deployment"] != Unchanged {
		t.Errorf("sync to 2-5 replicas: %v", a)
	}
	h, err := hpas.Get(ctx, WorkerName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	four := resource.MustParse("4")
	wantSpec := autoscalingv2.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: WorkerName},
		MinReplicas:    ptr(int32(2)),
		MaxReplicas:    5,
		Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
			Metric: autoscalingv2.MetricIdentifier{Name: "talkide_worker_turns_running"},
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: &four},
		}}},
	}
	got := h.Spec
	got.Behavior = nil
	if diff := cmp.Diff(wantSpec, got); diff != "" {
		t.Errorf("autoscaler (-want +got):\n%s", diff)
	}
	if b := h.Spec.Behavior; b == nil || b.ScaleDown == nil || b.ScaleDown.StabilizationWindowSeconds == nil || *b.ScaleDown.StabilizationWindowSeconds < 300 {
		t.Errorf("autoscaler's scale-down behaviour %+v: want a stabilization window of 5 minutes or more", b)
	}
	if got := replicas(); got != 3 {
		t.Errorf("the Deployment's 3 replicas, within 2-5, became %d", got)
	}

	// The autoscaler's controller scales to 4: syncs keep it, twice (the
	// second changes nothing at all).
	scaleAs(4)
	f.sync(t, p)
	if got := replicas(); got != 4 {
		t.Errorf("after the autoscaler set 4 and a sync: %d replicas", got)
	}
	if a := actions(f.sync(t, p)); a["Deployment"] != Unchanged || a["HorizontalPodAutoscaler"] != Unchanged {
		t.Errorf("a second sync under the autoscaler: %v", a)
	}
	if got := replicas(); got != 4 {
		t.Errorf("after a second sync: %d replicas, want 4", got)
	}
	// Outside the bounds (someone scaled by hand): brought back within.
	for _, c := range []struct{ set, want int }{{9, 5}, {1, 2}} {
		scaleAs(c.set)
		f.sync(t, p)
		if got := replicas(); got != int32(c.want) {
			t.Errorf("scaled to %d, synced: %d replicas, want %d", c.set, got, c.want)
		}
	}

	st, err := p.Status(ctx, f.tenant, f.env)
	if err != nil {
		t.Fatal(err)
	}
	exists := map[string]bool{}
	for _, o := range st.Objects {
		exists[o.Kind] = o.Exists
	}
	if !exists["HorizontalPodAutoscaler"] || !exists["PodDisruptionBudget"] || st.DesiredReplicas != 2 ||
		st.Scale != (store.EnvScale{MinReplicas: 2, MaxReplicas: 5, TurnsPerReplica: 4}) || st.Autoscaler == "" {
		t.Errorf("status under the autoscaler: %+v", st)
	}

	// Back to a fixed count: the autoscaler goes first, the count is set.
	setScale(store.EnvScale{MinReplicas: 3})
	if a := actions(f.sync(t, p)); a["HorizontalPodAutoscaler"] != Deleted || a["Deployment"] != Updated {
		t.Errorf("sync back to 3 replicas: %v", a)
	}
	if _, err := hpas.Get(ctx, WorkerName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("back to 3: autoscaler %v, want none", err)
	}
	if got := replicas(); got != 3 {
		t.Errorf("back to 3: %d replicas", got)
	}
	// A count another manager sets is taken back at a fixed count.
	scaleAs(1)
	if a := actions(f.sync(t, p)); a["HorizontalPodAutoscaler"] != Absent {
		t.Errorf("sync at 3 again: %v", a)
	}
	if got := replicas(); got != 3 {
		t.Errorf("fixed at 3, scaled to 1 by hand, synced: %d replicas", got)
	}
	st, err = p.Status(ctx, f.tenant, f.env)
	if err != nil {
		t.Fatal(err)
	}
	if st.Autoscaler != "" || st.DesiredReplicas != 3 {
		t.Errorf("status at a fixed count: %+v", st)
	}
}

// The autoscaler's line in a status says why it does not scale.
func TestAutoscalerState(t *testing.T) {
	h := &autoscalingv2.HorizontalPodAutoscaler{
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MinReplicas: ptr(int32(2)), MaxReplicas: 5},
		Status: autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: 2, DesiredReplicas: 2, Conditions: []autoscalingv2.HorizontalPodAutoscalerCondition{
			{Type: autoscalingv2.AbleToScale, Status: "True", Reason: "SucceededGetScale"},
			{Type: autoscalingv2.ScalingActive, Status: "False", Reason: "FailedGetPodsMetric", Message: "unable to get metric talkide_worker_turns_running"},
			{Type: autoscalingv2.ScalingLimited, Status: "False", Reason: "DesiredWithinRange"},
		}},
	}
	want := "2-5 replicas, current 2, desired 2; ScalingActive False: FailedGetPodsMetric: unable to get metric talkide_worker_turns_running"
	if got := autoscalerState(h); got != want {
		t.Errorf("autoscalerState = %q, want %q", got, want)
	}
}

// The running reconciler, as the shipped ClusterRole, watches the
// autoscaler and the disruption budget (each deleted or edited comes
// back), and a sync it makes keeps the count the autoscaler's controller
// set.
func TestReconcilerKeepsTheAutoscaler(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	if err := f.st.SetEnvScale(ctx, f.tenant, f.env, store.EnvScale{MinReplicas: 2, MaxReplicas: 5}); err != nil {
		t.Fatal(err)
	}
	defer run(t, f.provisioner(shippedClient(t, f.srv), &Options{Resync: time.Hour}))()
	admin := f.srv.Client(t)
	hpas := admin.AutoscalingV2().HorizontalPodAutoscalers(f.ns)
	pdbs := admin.PolicyV1().PodDisruptionBudgets(f.ns)
	deps := admin.AppsV1().Deployments(f.ns)
	exists := func(get func() error) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) { return get() == nil, nil }
	}
	hpaExists := exists(func() error { _, err := hpas.Get(ctx, WorkerName, metav1.GetOptions{}); return err })
	pdbExists := exists(func() error { _, err := pdbs.Get(ctx, WorkerName, metav1.GetOptions{}); return err })
	waitFor(t, "the first sync", func(ctx context.Context) (bool, error) {
		_, err := admin.NetworkingV1().NetworkPolicies(f.ns).Get(ctx, WorkerName, metav1.GetOptions{})
		return err == nil, nil
	})
	waitFor(t, "the autoscaler", hpaExists)

	if err := hpas.Delete(ctx, WorkerName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the autoscaler back", hpaExists)
	// Edits of the specs by another manager are taken back too: updates
	// that change a spec are not taken for status-only ones.
	if _, err := hpas.Patch(ctx, WorkerName, types.MergePatchType, []byte(`{"spec":{"maxReplicas":40}}`), metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the autoscaler's bounds back", func(ctx context.Context) (bool, error) {
		h, err := hpas.Get(ctx, WorkerName, metav1.GetOptions{})
		return err == nil && h.Spec.MaxReplicas == 5, err
	})
	if _, err := pdbs.Patch(ctx, WorkerName, types.MergePatchType, []byte(`{"spec":{"maxUnavailable":3}}`), metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the budget's maxUnavailable back", func(ctx context.Context) (bool, error) {
		b, err := pdbs.Get(ctx, WorkerName, metav1.GetOptions{})
		return err == nil && b.Spec.MaxUnavailable.IntValue() == 1, err
	})

	// The autoscaler's controller scales to 4; then a deleted budget
	// makes the reconciler sync, and its sync is done once the budget is
	// back.
	if _, err := deps.Patch(ctx, WorkerName, types.MergePatchType, []byte(`{"spec":{"replicas":4}}`), metav1.PatchOptions{FieldManager: "horizontal-pod-autoscaler"}, "scale"); err != nil {
		t.Fatal(err)
	}
	if err := pdbs.Delete(ctx, WorkerName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the disruption budget back", pdbExists)
	d, err := deps.Get(ctx, WorkerName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 4 {
		t.Errorf("after the reconciler's sync: %d replicas, want the autoscaler's 4", *d.Spec.Replicas)
	}
}

// An update is taken for a status-only one only when the object has a
// generation that did not move and its labels stayed.
func TestStatusOnly(t *testing.T) {
	obj := func(gen int64, l map[string]string) *metav1.ObjectMeta {
		return &metav1.ObjectMeta{Generation: gen, Labels: l}
	}
	l := map[string]string{LabelTenant: "a", LabelEnv: "b"}
	tests := map[string]struct {
		old, new any
		want     bool
	}{
		"status only":        {obj(3, l), obj(3, l), true},
		"spec changed":       {obj(3, l), obj(4, l), false},
		"labels changed":     {obj(3, l), obj(3, map[string]string{LabelTenant: "a"}), false},
		"no generation kind": {obj(0, l), obj(0, l), false},
		"not an object":      {"x", obj(3, l), false},
	}
	for name, tt := range tests {
		if got := statusOnly(tt.old, tt.new); got != tt.want {
			t.Errorf("%s: statusOnly = %v, want %v", name, got, tt.want)
		}
	}
}
