package auth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/store"
)

// Memberships from an OpenID Connect claim (OIDCOptions.TenantsClaim): the
// provider says, at each login, which tenants the user belongs to, and the
// login makes the stored memberships say exactly that.

// maxClaimValues bounds how many values of the tenants claim a login reads:
// a provider's group list can be long, and each value may cost a write.
const maxClaimValues = 256

// ParseTenantClaim reads one value of the tenants claim:
// "tenant", "tenant/env", each optionally followed by ":member" or
// ":tenant-admin" (member when absent). The tenant and env follow the id
// rule (contract.ValidateID).
func ParseTenantClaim(v string) (store.Membership, error) {
	rest, role, hasRole := strings.Cut(v, ":")
	m := store.Membership{Role: store.RoleMember}
	if hasRole {
		m.Role = store.Role(role)
		if !m.Role.Valid() {
			return store.Membership{}, fmt.Errorf("role %q: want %s or %s", role, store.RoleMember, store.RoleTenantAdmin)
		}
	}
	tenant, env, hasEnv := strings.Cut(rest, "/")
	if err := contract.ValidateID("tenant", tenant); err != nil {
		return store.Membership{}, err
	}
	if hasEnv {
		if err := contract.ValidateID("env", env); err != nil {
			return store.Membership{}, err
		}
	}
	m.Tenant, m.Env = tenant, env
	return m, nil
}

// claimStrings reads a claim that is a string or an array of strings;
// anything else holds none.
func claimStrings(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// claimMemberships turns the tenants claim's values into memberships of
// userID: the values with prefix, prefix removed, that parse; of two for one
// tenant-env the higher role wins. The values left out are returned for the
// log (never an error: a provider's groups are mostly someone else's).
func claimMemberships(userID, prefix string, values []string) (ms []store.Membership, ignored []string) {
	if len(values) > maxClaimValues {
		ignored = append(ignored, fmt.Sprintf("%d values beyond the first %d", len(values)-maxClaimValues, maxClaimValues))
		values = values[:maxClaimValues]
	}
	byEnv := map[[2]string]int{}
	for _, v := range values {
		spec, ok := strings.CutPrefix(v, prefix)
		if !ok {
			continue
		}
		m, err := ParseTenantClaim(spec)
		if err != nil {
			ignored = append(ignored, fmt.Sprintf("%.80q: %v", v, err))
			continue
		}
		m.UserID = userID
		k := [2]string{m.Tenant, m.Env}
		if i, seen := byEnv[k]; seen {
			if m.Role == store.RoleTenantAdmin {
				ms[i].Role = m.Role
			}
			continue
		}
		byEnv[k] = len(ms)
		ms = append(ms, m)
	}
	return ms, ignored
}

// syncMemberships makes the memberships of userID that a claim made those
// of want: it sets each of want whose tenant-env exists (the others are
// returned as ignored) and removes the claim's others. A membership an
// operator put is kept as it is, whatever the claim says of its
// tenant-env. A membership that keeps its role keeps its CreatedAt.
func syncMemberships(ctx context.Context, st store.Store, userID string, want []store.Membership, now time.Time) (kept []store.Membership, ignored []string, err error) {
	have, err := st.ListMemberships(ctx, userID, "")
	if err != nil {
		return nil, nil, err
	}
	for _, m := range want {
		m.CreatedAt, m.FromClaim = now, true
		i := slices.IndexFunc(have, func(h store.Membership) bool { return h.Tenant == m.Tenant && h.Env == m.Env })
		// An operator's membership of the same tenant-env stands as the
		// operator set it: the claim neither changes its role nor takes it
		// over.
		if i >= 0 && (!have[i].FromClaim || have[i].Role == m.Role) {
			kept = append(kept, have[i])
			continue
		}
		stored, err := st.PutMembership(ctx, m)
		if errors.Is(err, store.ErrNotFound) {
			where := m.Tenant
			if m.Env != "" {
				where += "/" + m.Env
			}
			ignored = append(ignored, "no tenant-env "+where)
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		kept = append(kept, stored)
	}
	for _, h := range have {
		if slices.ContainsFunc(want, func(m store.Membership) bool { return h.Tenant == m.Tenant && h.Env == m.Env }) {
			continue
		}
		if !h.FromClaim {
			kept = append(kept, h) // an operator's: no login removes it
			continue
		}
		if err := st.DeleteMembership(ctx, userID, h.Tenant, h.Env); err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, nil, err
		}
	}
	return kept, ignored, nil
}

// anyExists reports whether the tenant-env (the tenant, for a tenant-wide
// membership) of any of ms exists.
func anyExists(ctx context.Context, st store.Store, ms []store.Membership) (bool, error) {
	if len(ms) == 0 {
		return false, nil
	}
	envs, err := st.ListEnvs(ctx)
	if err != nil {
		return false, err
	}
	for _, m := range ms {
		if slices.ContainsFunc(envs, func(e store.Env) bool { return e.Tenant == m.Tenant && (m.Env == "" || e.Name == m.Env) }) {
			return true, nil
		}
	}
	return false, nil
}
