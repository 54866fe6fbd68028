package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/talkide/platform/internal/store"
)

// PutEnv implements store.Store.
func (s *Store) PutEnv(ctx context.Context, e store.Env) error {
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO tenants (id, created_at) VALUES ($1, $2)
			ON CONFLICT (id) DO NOTHING`, e.Tenant, millis(e.CreatedAt)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO envs (tenant, name, worker_url, created_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (tenant, name) DO UPDATE SET worker_url = excluded.worker_url`,
			e.Tenant, e.Name, e.WorkerURL, millis(e.CreatedAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: put env %s/%s: %w", e.Tenant, e.Name, err)
	}
	return nil
}

// GetEnv implements store.Store.
func (s *Store) GetEnv(ctx context.Context, tenant, env string) (store.Env, error) {
	row := s.pool.QueryRow(ctx, `SELECT tenant, name, worker_url, created_at FROM envs
		WHERE tenant = $1 AND name = $2`, tenant, env)
	e, err := scanEnv(row)
	if err != nil {
		return store.Env{}, fmt.Errorf("postgres: get env %s/%s: %w", tenant, env, notFound(err))
	}
	return e, nil
}

// ListEnvs implements store.Store. COLLATE "C" orders by bytes, as SQLite
// does, whatever the database's collation.
func (s *Store) ListEnvs(ctx context.Context) ([]store.Env, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant, name, worker_url, created_at FROM envs
		ORDER BY tenant COLLATE "C", name COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list envs: %w", err)
	}
	es, err := collect(rows, scanEnv)
	if err != nil {
		return nil, fmt.Errorf("postgres: list envs: %w", err)
	}
	return es, nil
}

func scanEnv(r pgx.Row) (store.Env, error) {
	var (
		e       store.Env
		created int64
	)
	if err := r.Scan(&e.Tenant, &e.Name, &e.WorkerURL, &created); err != nil {
		return store.Env{}, err
	}
	e.CreatedAt = fromMillis(created)
	return e, nil
}
