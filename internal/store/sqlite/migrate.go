package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/talkide/platform/internal/store/migrations"
	"github.com/talkide/platform/internal/store/sqlcore"
)

// migrate applies the migrations db lacks, each in its own transaction that
// also records it in schema_migrations. It refuses a database that a newer
// build has migrated further than it knows.
func migrate(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	ms, err := migrations.Files(migrations.SQLite)
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, migrations.VersionTable); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	var latest sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&latest); err != nil {
		return fmt.Errorf("read schema_migrations: %w", err)
	}
	if err := migrations.CheckVersion(latest.Int64, ms); err != nil {
		return err
	}
	return migrations.ApplyAll(ms, log, func(m migrations.Migration) (bool, error) { return apply(ctx, db, m) })
}

// apply applies m unless schema_migrations already records it. It checks
// inside its (immediate, so exclusive) transaction, so two processes opening
// one file apply m once.
func apply(ctx context.Context, db *sql.DB, m migrations.Migration) (applied bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, m.Version).Scan(&n); err != nil {
		return false, err
	}
	if n > 0 {
		return false, nil
	}
	for _, stmt := range m.Statements() {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return false, fmt.Errorf("%w\n%s", err, stmt)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`, m.Version, sqlcore.Millis(time.Now())); err != nil {
		return false, err
	}
	return true, tx.Commit()
}
