package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/talkide/platform/internal/store"
)

var _ store.RateWindows = (*Store)(nil)

// HitRate is one statement, an upsert that returns the new count: a
// replica counts without a transaction, and PostgreSQL's row lock on
// conflict makes concurrent hits of one window from any replica add up.
func (s *Store) HitRate(ctx context.Context, name, key string, start time.Time) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `INSERT INTO rate_windows (name, rate_key, window_start, hits) VALUES ($1, $2, $3, 1)
		ON CONFLICT (name, rate_key, window_start) DO UPDATE SET hits = rate_windows.hits + 1
		RETURNING hits`, name, key, start.UnixMilli()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("postgres: count a %s event: %w", name, err)
	}
	return n, nil
}

// RateHits reads a window's count.
func (s *Store) RateHits(ctx context.Context, name, key string, start time.Time) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(MAX(hits), 0) FROM rate_windows WHERE name = $1 AND rate_key = $2 AND window_start = $3`,
		name, key, start.UnixMilli()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("postgres: read a %s count: %w", name, err)
	}
	return n, nil
}

// SweepRates deletes the windows that started before before.
func (s *Store) SweepRates(ctx context.Context, before time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM rate_windows WHERE window_start < $1`, before.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("postgres: sweep rate windows: %w", err)
	}
	return tag.RowsAffected(), nil
}
