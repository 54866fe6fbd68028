package auth

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/store"
)

// ErrBadRole is a role the store does not keep.
var ErrBadRole = fmt.Errorf("the role must be %s or %s", store.RoleMember, store.RoleTenantAdmin)

// MaxUserName bounds a user's display name.
const MaxUserName = 128

// AddMember puts m.UserID in m.Tenant (or m.Env of it) with m.Role,
// creating the user (named name, else by the id) when needed; run again,
// it changes the role. talkide admin user add and the operator API both
// add members through it. The error wraps store.ErrNotFound when the
// tenant-env does not exist, ErrBadRole for a bad role, and is a
// contract.FieldError for a bad id or name.
func AddMember(ctx context.Context, st store.Store, m store.Membership, name string, now time.Time) (store.Membership, error) {
	if err := contract.ValidateID("user", m.UserID); err != nil {
		return store.Membership{}, err
	}
	if err := contract.ValidateID("tenant", m.Tenant); err != nil {
		return store.Membership{}, err
	}
	if m.Env != "" {
		if err := contract.ValidateID("env", m.Env); err != nil {
			return store.Membership{}, err
		}
	}
	if !m.Role.Valid() {
		return store.Membership{}, fmt.Errorf("role %.32q: %w", m.Role, ErrBadRole)
	}
	if name == "" {
		name = m.UserID
	} else if _, err := contract.ValidateLine("name", name, MaxUserName); err != nil {
		return store.Membership{}, err
	}
	where := "tenant " + m.Tenant
	if m.Env != "" {
		where = "tenant-env " + m.Tenant + "/" + m.Env
	}
	// Checked first, so that a membership of nowhere creates no user.
	if ok, err := anyExists(ctx, st, []store.Membership{m}); err != nil {
		return store.Membership{}, err
	} else if !ok {
		return store.Membership{}, fmt.Errorf("%s does not exist: %w", where, store.ErrNotFound)
	}
	now = now.UTC()
	if err := st.PutUser(ctx, store.User{ID: m.UserID, Name: name, CreatedAt: now}); err != nil {
		return store.Membership{}, err
	}
	m.CreatedAt = now
	stored, err := st.PutMembership(ctx, m)
	if errors.Is(err, store.ErrNotFound) {
		return store.Membership{}, fmt.Errorf("%s does not exist: %w", where, err)
	}
	return stored, err
}
