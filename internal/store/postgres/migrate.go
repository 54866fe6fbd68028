package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/talkide/platform/internal/store/migrations"
	"github.com/talkide/platform/internal/store/sqlcore"
)

// lockMigrations takes the transaction-scoped advisory lock that serialises
// migrations, so that two processes opening one database at once never apply
// a migration twice (nor race to create schema_migrations: concurrent CREATE
// TABLE IF NOT EXISTS can fail on PostgreSQL's catalog). The lock is keyed by
// the schema the tables live in, so stores in different schemas of one
// database (the tests') do not wait for each other.
const lockMigrations = `SELECT pg_advisory_xact_lock(` + migrationLockKey + `)`

// migrationLockKey is the SQL expression of the advisory lock's key.
const migrationLockKey = `hashtextextended('talkide.schema_migrations.' || current_schema(), 0)`

// migrate applies the migrations the database lacks, each in its own
// transaction that also records it in schema_migrations. It refuses a
// database that a newer build has migrated further than it knows.
func migrate(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	ms, err := migrations.Files(migrations.Postgres)
	if err != nil {
		return err
	}
	err = pgx.BeginTxFunc(ctx, pool, readCommitted, func(tx pgx.Tx) error {
		var schema *string
		if err := tx.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
			return err
		}
		if schema == nil {
			return fmt.Errorf("no schema of the search_path exists to create the tables in")
		}
		if _, err := tx.Exec(ctx, lockMigrations); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		if _, err := tx.Exec(ctx, migrations.VersionTable); err != nil {
			return fmt.Errorf("create schema_migrations: %w", err)
		}
		var latest *int64
		if err := tx.QueryRow(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&latest); err != nil {
			return fmt.Errorf("read schema_migrations: %w", err)
		}
		if latest == nil {
			return nil
		}
		return migrations.CheckVersion(*latest, ms)
	})
	if err != nil {
		return err
	}
	return migrations.ApplyAll(ms, log, func(m migrations.Migration) (bool, error) { return apply(ctx, pool, m) })
}

// apply applies m unless schema_migrations already records it. It checks
// after taking the migration lock, in the transaction that applies m, so
// that a process which waited for another's lock sees what that one did.
func apply(ctx context.Context, pool *pgxpool.Pool, m migrations.Migration) (applied bool, err error) {
	err = pgx.BeginTxFunc(ctx, pool, readCommitted, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lockMigrations); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		// READ COMMITTED (whatever the server's default): this statement's
		// snapshot is taken after the lock was granted, so it sees a
		// migration committed by the lock's previous holder.
		var done bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, m.Version).Scan(&done); err != nil {
			return err
		}
		if done {
			return nil
		}
		for _, stmt := range m.Statements() {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("%w\n%s", err, stmt)
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)`, m.Version, sqlcore.Millis(time.Now())); err != nil {
			return err
		}
		applied = true
		return nil
	})
	if err != nil {
		return false, err
	}
	return applied, nil
}
