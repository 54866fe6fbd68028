package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/talkide/platform/internal/store"
)

// PutEnv implements store.Store.
func (s *Store) PutEnv(ctx context.Context, e store.Env) error {
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO tenants (id, created_at) VALUES (?, ?)
			ON CONFLICT (id) DO NOTHING`, e.Tenant, millis(e.CreatedAt)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO envs (tenant, name, worker_url, created_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (tenant, name) DO UPDATE SET worker_url = excluded.worker_url`,
			e.Tenant, e.Name, e.WorkerURL, millis(e.CreatedAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: put env %s/%s: %w", e.Tenant, e.Name, err)
	}
	return nil
}

// GetEnv implements store.Store.
func (s *Store) GetEnv(ctx context.Context, tenant, env string) (store.Env, error) {
	row := s.reader.QueryRowContext(ctx, `SELECT tenant, name, worker_url, created_at FROM envs
		WHERE tenant = ? AND name = ?`, tenant, env)
	e, err := scanEnv(row)
	if err != nil {
		return store.Env{}, fmt.Errorf("sqlite: get env %s/%s: %w", tenant, env, notFound(err))
	}
	return e, nil
}

// ListEnvs implements store.Store.
func (s *Store) ListEnvs(ctx context.Context) ([]store.Env, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT tenant, name, worker_url, created_at FROM envs
		ORDER BY tenant, name`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list envs: %w", err)
	}
	es, err := collect(rows, scanEnv)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list envs: %w", err)
	}
	return es, nil
}

func scanEnv(r scanner) (store.Env, error) {
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
