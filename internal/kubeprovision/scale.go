package kubeprovision

import (
	"context"
	"fmt"

	"github.com/talkide/platform/internal/store"
)

// ScaleResult is what SetScale did.
type ScaleResult struct {
	Before, After store.EnvScale // resolved
	Sync          Result
}

// SetScale stores sc as the scale of tenant/env (store.ErrInvalidScale
// wrapped for one out of bounds, ErrRetired for a retired env, which is
// left unchanged) and syncs the env, so the Deployment, its autoscaler and
// its disruption budget follow at once.
func (p *Provisioner) SetScale(ctx context.Context, tenant, env string, sc store.EnvScale) (ScaleResult, error) {
	if err := sc.Validate(); err != nil {
		return ScaleResult{}, fmt.Errorf("kubeprovision: %w", err)
	}
	e, err := p.st.GetEnv(ctx, tenant, env)
	if err != nil {
		return ScaleResult{}, fmt.Errorf("kubeprovision: %w", err)
	}
	if !e.RetiredAt.IsZero() {
		return ScaleResult{}, fmt.Errorf("kubeprovision: %s/%s: %w (talkide admin env add makes it live again)", tenant, env, ErrRetired)
	}
	res := ScaleResult{Before: e.Scale.Resolved(), After: sc.Resolved()}
	if err := p.st.SetEnvScale(ctx, tenant, env, sc); err != nil {
		return res, fmt.Errorf("kubeprovision: %w", err)
	}
	p.log.Info("set tenant-env scale", "tenant", tenant, "env", env,
		"min_replicas", res.After.MinReplicas, "max_replicas", res.After.MaxReplicas, "turns_per_replica", res.After.TurnsPerReplica)
	res.Sync, err = p.Sync(ctx, tenant, env, nil)
	return res, err
}
