package sqlcore

import (
	"context"
	"fmt"

	"github.com/talkide/platform/internal/store"
)

const userColumns = `id, name, created_at`

const (
	// putUser leaves an existing user as it is.
	putUser = `INSERT INTO users (` + userColumns + `) VALUES ($1, $2, $3)
	ON CONFLICT (id) DO NOTHING`

	getUser = `SELECT ` + userColumns + ` FROM users WHERE id = $1`
)

func userArgs(u store.User) []any {
	return []any{u.ID, u.Name, Millis(u.CreatedAt)}
}

func scanUser(r Row) (store.User, error) {
	var (
		u       store.User
		created int64
	)
	if err := r.Scan(&u.ID, &u.Name, &created); err != nil {
		return store.User{}, err
	}
	u.CreatedAt = FromMillis(created)
	return u, nil
}

// PutUser implements store.Store.
func (t *Tables) PutUser(ctx context.Context, u store.User) error {
	if _, err := t.db.Exec(ctx, putUser, userArgs(u)...); err != nil {
		return fmt.Errorf("%s: put user %s: %w", t.name, u.ID, err)
	}
	return nil
}

// GetUser implements store.Store.
func (t *Tables) GetUser(ctx context.Context, id string) (store.User, error) {
	return getByID(ctx, t, scanUser, getUser, "user", id)
}
