package sqlcore

import (
	"context"
	"fmt"
	"time"

	"github.com/talkide/platform/internal/store"
)

var _ store.StreamCounts = (*Tables)(nil)

const (
	beatStreamReplica = `UPDATE stream_replicas SET seen_at = $2 WHERE replica = $1`
	putStreamReplica  = `INSERT INTO stream_replicas (replica, seen_at) VALUES ($1, $2)
	ON CONFLICT (replica) DO UPDATE SET seen_at = excluded.seen_at`
	clearStreamCounts = `DELETE FROM stream_counts WHERE replica = $1`
	putStreamCount    = `INSERT INTO stream_counts (replica, kind, subject, streams) VALUES ($1, $2, $3, $4)
	ON CONFLICT (replica, kind, subject) DO UPDATE SET streams = excluded.streams`
	dropStreamCount = `DELETE FROM stream_counts WHERE replica = $1 AND kind = $2 AND subject = $3`
	// The heartbeat's row goes first in a withdrawal and a sweep: deleting
	// it waits for a publication that holds it (the publication's UPDATE
	// locks it), and a publication that comes after finds it gone and
	// publishes whole, so no count outlives its heartbeat.
	dropStreamReplica   = `DELETE FROM stream_replicas WHERE replica = $1`
	sweepStreamReplicas = `DELETE FROM stream_replicas WHERE seen_at < $1 RETURNING replica`
	otherStreamCounts   = `SELECT c.kind, c.subject, CAST(SUM(c.streams) AS BIGINT)
	FROM stream_counts c JOIN stream_replicas r ON r.replica = c.replica
	WHERE r.replica <> $1 AND r.seen_at >= $2
	GROUP BY c.kind, c.subject`
)

// PublishStreamCounts implements store.StreamCounts.
func (t *Tables) PublishStreamCounts(ctx context.Context, replica string, at time.Time, changes []store.StreamCount, whole bool) (bool, error) {
	var puts, drops [][]any
	for _, c := range changes {
		if c.Kind != store.StreamsOfUser && c.Kind != store.StreamsOfConversation {
			return false, fmt.Errorf("%s: publish stream counts of %s: unknown kind %q", t.name, replica, c.Kind)
		}
		if c.Streams > 0 {
			puts = append(puts, []any{replica, c.Kind, c.Subject, c.Streams})
		} else if !whole {
			drops = append(drops, []any{replica, c.Kind, c.Subject})
		}
	}
	known := true
	err := t.db.InTx(ctx, func(tx Tx) error {
		if whole {
			if _, err := tx.Exec(ctx, putStreamReplica, replica, Millis(at)); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, clearStreamCounts, replica); err != nil {
				return err
			}
		} else {
			n, err := tx.Exec(ctx, beatStreamReplica, replica, Millis(at))
			if err != nil {
				return err
			}
			if n == 0 {
				known = false
				return nil
			}
		}
		for _, run := range []struct {
			query string
			args  [][]any
		}{{putStreamCount, puts}, {dropStreamCount, drops}} {
			if len(run.args) == 0 {
				continue
			}
			if _, err := tx.ExecEach(ctx, run.query, run.args); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("%s: publish stream counts of %s: %w", t.name, replica, err)
	}
	return known, nil
}

func scanStreamCount(r Row) (store.StreamCount, error) {
	var c store.StreamCount
	err := r.Scan(&c.Kind, &c.Subject, &c.Streams)
	return c, err
}

// OtherStreamCounts implements store.StreamCounts.
func (t *Tables) OtherStreamCounts(ctx context.Context, replica string, since time.Time) ([]store.StreamCount, error) {
	cs, err := collect(ctx, t.db, scanStreamCount, otherStreamCounts, replica, Millis(since))
	if err != nil {
		return nil, fmt.Errorf("%s: stream counts of the replicas but %s: %w", t.name, replica, err)
	}
	return cs, nil
}

// WithdrawStreamCounts implements store.StreamCounts.
func (t *Tables) WithdrawStreamCounts(ctx context.Context, replica string) error {
	err := t.db.InTx(ctx, func(tx Tx) error {
		if _, err := tx.Exec(ctx, dropStreamReplica, replica); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, clearStreamCounts, replica)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: withdraw stream counts of %s: %w", t.name, replica, err)
	}
	return nil
}

// SweepStreamCounts implements store.StreamCounts.
func (t *Tables) SweepStreamCounts(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := t.db.InTx(ctx, func(tx Tx) error {
		gone, err := collect(ctx, tx, func(r Row) ([]any, error) {
			var id string
			err := r.Scan(&id)
			return []any{id}, err
		}, sweepStreamReplicas, Millis(before))
		if err != nil || len(gone) == 0 {
			return err
		}
		n = int64(len(gone))
		_, err = tx.ExecEach(ctx, clearStreamCounts, gone)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("%s: sweep stream counts: %w", t.name, err)
	}
	return n, nil
}
