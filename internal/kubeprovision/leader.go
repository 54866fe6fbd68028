package kubeprovision

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// LeaseName is the Lease the control-plane replicas elect the one that
// runs the reconciler with.
const LeaseName = "talkide-provisioner"

// RunWithLeaderElection runs Run only while this process holds the Lease
// LeaseName in namespace (the control-plane's own), so N replicas never
// rotate the same token twice. identity names this replica (its pod name).
// A replica that loses the lease stops reconciling and campaigns again; it
// returns when ctx ends.
func (p *Provisioner) RunWithLeaderElection(ctx context.Context, namespace, identity string) error {
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, LeaseName,
		p.cs.CoreV1(), p.cs.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: identity})
	if err != nil {
		return fmt.Errorf("kubeprovision: lease lock: %w", err)
	}
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock:            lock,
			ReleaseOnCancel: true,
			LeaseDuration:   15 * time.Second,
			RenewDeadline:   10 * time.Second,
			RetryPeriod:     2 * time.Second,
			Name:            LeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					p.log.Info("provisioner: leading", "identity", identity)
					if err := p.Run(ctx); err != nil {
						p.log.Error("provisioner stopped", "err", err)
					}
				},
				OnStoppedLeading: func() { p.log.Info("provisioner: not leading", "identity", identity) },
			},
		})
	}
	return nil
}
