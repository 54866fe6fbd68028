package sqlcore

import (
	"context"
	"fmt"
	"time"

	"github.com/talkide/platform/internal/store"
)

// Tenants and envs. A tenant is stored with its first env and only ever
// referred to.

const envColumns = `tenant, name, worker_url, created_at, retired_at, min_replicas, max_replicas, turns_per_replica`

const (
	insertTenant = `INSERT INTO tenants (id, created_at) VALUES ($1, $2)
	ON CONFLICT (id) DO NOTHING`

	// putEnv inserts an env or changes its worker URL, never its
	// created_at; putting a retired env back makes it live again.
	putEnv = `INSERT INTO envs (tenant, name, worker_url, created_at) VALUES ($1, $2, $3, $4)
	ON CONFLICT (tenant, name) DO UPDATE SET worker_url = excluded.worker_url, retired_at = NULL`

	// retireEnv keeps the first retirement's time.
	retireEnv = `UPDATE envs SET retired_at = COALESCE(retired_at, $1) WHERE tenant = $2 AND name = $3`

	setEnvScale = `UPDATE envs SET min_replicas = $1, max_replicas = $2, turns_per_replica = $3 WHERE tenant = $4 AND name = $5`

	getEnv = `SELECT ` + envColumns + ` FROM envs WHERE tenant = $1 AND name = $2`
)

func listEnvs(d Dialect) string {
	return `SELECT ` + envColumns + ` FROM envs ORDER BY tenant` + d.ByBytes + `, name` + d.ByBytes
}

func envArgs(e store.Env) []any {
	return []any{e.Tenant, e.Name, e.WorkerURL, Millis(e.CreatedAt)}
}

func scanEnv(r Row) (store.Env, error) {
	var (
		e       store.Env
		created int64
		retired *int64
	)
	var minR, maxR, turns int64
	if err := r.Scan(&e.Tenant, &e.Name, &e.WorkerURL, &created, &retired, &minR, &maxR, &turns); err != nil {
		return store.Env{}, err
	}
	e.CreatedAt = FromMillis(created)
	e.RetiredAt = fromNullMillis(retired)
	e.Scale = store.EnvScale{MinReplicas: int(minR), MaxReplicas: int(maxR), TurnsPerReplica: int(turns)}
	return e, nil
}

// PutEnv implements store.Store.
func (t *Tables) PutEnv(ctx context.Context, e store.Env) error {
	err := t.db.InTx(ctx, func(tx Tx) error {
		if _, err := tx.Exec(ctx, insertTenant, e.Tenant, Millis(e.CreatedAt)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, putEnv, envArgs(e)...)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: put env %s/%s: %w", t.name, e.Tenant, e.Name, err)
	}
	return nil
}

// GetEnv implements store.Store.
func (t *Tables) GetEnv(ctx context.Context, tenant, env string) (store.Env, error) {
	e, err := scanEnv(t.db.QueryRow(ctx, getEnv, tenant, env))
	if err != nil {
		return store.Env{}, fmt.Errorf("%s: get env %s/%s: %w", t.name, tenant, env, t.notFound(err))
	}
	return e, nil
}

// ListEnvs implements store.Store.
func (t *Tables) ListEnvs(ctx context.Context) ([]store.Env, error) {
	es, err := collect(ctx, t.db, scanEnv, t.listEnvs)
	if err != nil {
		return nil, fmt.Errorf("%s: list envs: %w", t.name, err)
	}
	return es, nil
}

// RetireEnv implements store.Store.
func (t *Tables) RetireEnv(ctx context.Context, tenant, env string, at time.Time) error {
	if at.IsZero() {
		return fmt.Errorf("%s: retire env %s/%s: zero time", t.name, tenant, env)
	}
	n, err := t.db.Exec(ctx, retireEnv, Millis(at), tenant, env)
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("%s: retire env %s/%s: %w", t.name, tenant, env, err)
	}
	return nil
}

// SetEnvScale implements store.Store.
func (t *Tables) SetEnvScale(ctx context.Context, tenant, env string, sc store.EnvScale) error {
	err := sc.Validate()
	if err == nil {
		var n int64
		n, err = t.db.Exec(ctx, setEnvScale, sc.MinReplicas, sc.MaxReplicas, sc.TurnsPerReplica, tenant, env)
		if err == nil && n == 0 {
			err = store.ErrNotFound
		}
	}
	if err != nil {
		return fmt.Errorf("%s: set scale of env %s/%s: %w", t.name, tenant, env, err)
	}
	return nil
}
