package kubeprovision

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/talkide/platform/internal/store"
)

// envKey names one tenant-env in the work queue.
type envKey struct{ tenant, env string }

// Run reconciles until ctx ends: every live env of the store is synced at
// start and every Options.Resync after, and any event on an object the
// provisioner owns (a watch on ManagedSelector) queues its env again, so a
// deleted or edited object is put back within moments. A failed sync is
// retried with backoff. Run returns nil when ctx ends; it returns an error
// only when the watches cannot start.
//
// With several control-plane replicas, only one should Run at a time
// (RunWithLeaderElection).
func (p *Provisioner) Run(ctx context.Context) error {
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedMaxOfRateLimiter(
			workqueue.NewTypedItemExponentialFailureRateLimiter[envKey](500*time.Millisecond, 5*time.Minute),
		),
		workqueue.TypedRateLimitingQueueConfig[envKey]{Name: "talkide-provisioner"})
	defer q.ShutDown()

	factory := informers.NewSharedInformerFactoryWithOptions(p.cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = ManagedSelector }))
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { p.enqueue(q, obj) },
		UpdateFunc: func(old, obj any) {
			if !statusOnly(old, obj) {
				p.enqueue(q, obj)
			}
		},
		DeleteFunc: func(obj any) { p.enqueue(q, obj) },
	}
	for _, inf := range []cache.SharedIndexInformer{
		factory.Core().V1().Namespaces().Informer(),
		factory.Core().V1().ServiceAccounts().Informer(),
		factory.Rbac().V1().Roles().Informer(),
		factory.Rbac().V1().RoleBindings().Informer(),
		factory.Core().V1().Secrets().Informer(),
		factory.Core().V1().PersistentVolumeClaims().Informer(),
		factory.Apps().V1().Deployments().Informer(),
		factory.Autoscaling().V2().HorizontalPodAutoscalers().Informer(),
		factory.Policy().V1().PodDisruptionBudgets().Informer(),
		factory.Core().V1().Services().Informer(),
		factory.Networking().V1().NetworkPolicies().Informer(),
	} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("kubeprovision: watch: %w", err)
		}
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok && ctx.Err() == nil {
			return fmt.Errorf("kubeprovision: the watch of %v did not start (RBAC: the control-plane's ClusterRole must allow list and watch)", typ)
		}
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	for range p.o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p.work(ctx, q) {
			}
		}()
	}
	p.log.Info("provisioner running", "resync", p.o.Resync, "env_poll", p.o.EnvPoll, "workers", p.o.Workers)
	t := time.NewTicker(p.o.Resync)
	defer t.Stop()
	poll := time.NewTicker(p.o.EnvPoll)
	defer poll.Stop()
	// known are the live envs of the last look at the store: a poll queues
	// only those it finds beside them.
	known := map[envKey]bool{}
	all := true
	for {
		p.resync(ctx, q, known, all)
		select {
		case <-ctx.Done():
			q.ShutDown()
			return nil
		case <-t.C:
			all = true
		case <-p.kick:
			all = true
		case <-poll.C:
			all = false
		}
	}
}

// resync queues the live envs of the store: every one when all is set,
// else those not in known (new, or made live again). known becomes the
// store's live envs.
func (p *Provisioner) resync(ctx context.Context, q workqueue.TypedRateLimitingInterface[envKey], known map[envKey]bool, all bool) {
	envs, err := p.st.ListEnvs(ctx)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Error("provisioner: list envs", "err", err)
		}
		return
	}
	live := map[envKey]bool{}
	for _, e := range envs {
		if !e.RetiredAt.IsZero() {
			continue
		}
		k := envKey{e.Tenant, e.Name}
		live[k] = true
		if all || !known[k] {
			q.Add(k)
		}
	}
	clear(known)
	for k := range live {
		known[k] = true
	}
}

// enqueue queues the env an owned object belongs to, by its labels.
func (p *Provisioner) enqueue(q workqueue.TypedRateLimitingInterface[envKey], obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	l := m.GetLabels()
	if l[LabelTenant] != "" && l[LabelEnv] != "" {
		q.Add(envKey{l[LabelTenant], l[LabelEnv]})
	}
}

// statusOnly reports whether an update of an owned object changed its
// status alone: a sync never reads a status, so it would change nothing.
// An autoscaler writes its status at every look at the metric, a
// Deployment's at every pod that starts or becomes ready; syncing on
// those would sync an autoscaled env every few seconds. The generation
// counts spec changes of the kinds that have one (0 for those that do
// not, whose updates are always synced); labels are compared since they
// map an object to its env.
func statusOnly(old, obj any) bool {
	o, ok1 := old.(metav1.Object)
	n, ok2 := obj.(metav1.Object)
	if !ok1 || !ok2 || n.GetGeneration() == 0 {
		return false
	}
	return o.GetGeneration() == n.GetGeneration() && maps.Equal(o.GetLabels(), n.GetLabels())
}

// work syncs one queued env; false when the queue is shut down.
func (p *Provisioner) work(ctx context.Context, q workqueue.TypedRateLimitingInterface[envKey]) bool {
	k, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(k)
	_, err := p.Sync(ctx, k.tenant, k.env, nil)
	switch {
	case err == nil, errors.Is(err, ErrRetired), errors.Is(err, store.ErrNotFound):
		// A retired env's leftovers (kept sessions) are left alone, and so
		// are objects whose env the store does not know.
		q.Forget(k)
	case ctx.Err() != nil:
	default:
		p.log.Warn("provisioner: sync failed, retrying", "tenant", k.tenant, "env", k.env, "err", err, "retries", q.NumRequeues(k))
		q.AddRateLimited(k)
	}
	return true
}
