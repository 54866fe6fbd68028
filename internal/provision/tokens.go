package provision

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/tokenscheme"
	"github.com/talkide/platform/internal/trust"
)

// DefaultTokenTTL is the lifetime of an identity token when none is given:
// long enough that rotation is a quarterly chore, short enough that a
// leaked token does not live for ever.
const DefaultTokenTTL = 90 * 24 * time.Hour

// ErrInvalidToken is wrapped by every Authenticate failure that is the
// token's fault (malformed, unknown, wrong secret, revoked, expired). The
// wrapped message says which, never the token.
var ErrInvalidToken = errors.New("identity token not valid")

// IssueIdentityToken issues a new identity token for an existing tenant-env,
// valid from now for ttl (DefaultTokenTTL when 0), and stores its hash. The
// token is returned once, here; the store never holds it.
//
// Issuing does not revoke earlier tokens of the tenant-env: during a
// rotation the old and the new token are both valid until the old one is
// revoked with RevokeIdentityToken, and the time between the two calls is
// the grace period in which the new Secret reaches the worker.
func IssueIdentityToken(ctx context.Context, st store.Store, tenant, env string, ttl time.Duration, now time.Time) (token string, rec store.IdentityToken, err error) {
	if ttl == 0 {
		ttl = DefaultTokenTTL
	}
	if ttl < 0 {
		return "", store.IdentityToken{}, fmt.Errorf("provision: token lifetime %s is negative", ttl)
	}
	if _, err := st.GetEnv(ctx, tenant, env); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return "", store.IdentityToken{}, fmt.Errorf("provision: tenant-env %s/%s does not exist (add it first): %w", tenant, env, store.ErrNotFound)
		}
		return "", store.IdentityToken{}, fmt.Errorf("provision: %w", err)
	}
	now = now.UTC()
	tok := trust.IdentityTokens.Issue()
	rec = store.IdentityToken{ID: tok.ID, Tenant: tenant, Env: env, Hash: tok.Hash, CreatedAt: now, ExpiresAt: now.Add(ttl)}
	if err := st.AddIdentityToken(ctx, rec); err != nil {
		return "", store.IdentityToken{}, fmt.Errorf("provision: %w", err)
	}
	// Read back what was stored (times to the millisecond).
	if stored, err := st.GetIdentityToken(ctx, tok.ID); err == nil {
		rec = stored
	}
	return tok.Token, rec, nil
}

// RevokeIdentityToken revokes the token with id at now and returns its
// record. A token revoked before keeps its first RevokedAt (compare it with
// now to tell). store.ErrNotFound when no token has that id.
func RevokeIdentityToken(ctx context.Context, st store.Store, id string, now time.Time) (store.IdentityToken, error) {
	if !tokenscheme.ValidID(id) {
		// Not echoed: a whole token pasted by mistake must not reach a
		// terminal log.
		return store.IdentityToken{}, fmt.Errorf("provision: not a token id (want the id alone, e.g. from the Secret's annotation, never the token): %w", store.ErrNotFound)
	}
	if err := st.RevokeIdentityToken(ctx, id, now.UTC()); err != nil {
		return store.IdentityToken{}, fmt.Errorf("provision: revoke token %s: %w", id, err)
	}
	rec, err := st.GetIdentityToken(ctx, id)
	if err != nil {
		return store.IdentityToken{}, fmt.Errorf("provision: %w", err)
	}
	return rec, nil
}

// Authenticate checks token against the store as the mint endpoint does and
// returns its record: the hash must match (constant-time), and at now the
// token must be neither revoked nor expired. Failures that are the token's
// fault wrap ErrInvalidToken; store failures are returned as they are.
func Authenticate(ctx context.Context, st store.Store, token string, now time.Time) (store.IdentityToken, error) {
	rec, err := tokenscheme.Verify(trust.IdentityTokens, token, now, func(id string) (store.IdentityToken, tokenscheme.Stored, bool, error) {
		rec, err := st.GetIdentityToken(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return rec, tokenscheme.Stored{}, false, nil
		}
		return rec, tokenscheme.Stored{Hash: rec.Hash, RevokedAt: rec.RevokedAt, ExpiresAt: rec.ExpiresAt}, err == nil, err
	})
	if errors.Is(err, tokenscheme.ErrInvalid) {
		return store.IdentityToken{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if err != nil {
		return store.IdentityToken{}, fmt.Errorf("provision: %w", err)
	}
	return rec, nil
}

// RetireEnv marks tenant/env retired in st and revokes every identity token
// of it at now (ending any grace period early), returning the ids it
// revoked. The Kubernetes provisioner calls it before it deletes anything;
// without Kubernetes it is the whole of retiring an env.
func RetireEnv(ctx context.Context, st store.Store, tenant, env string, now time.Time) ([]string, error) {
	if err := st.RetireEnv(ctx, tenant, env, now.UTC()); err != nil {
		return nil, fmt.Errorf("provision: retire %s/%s: %w", tenant, env, err)
	}
	toks, err := st.ListIdentityTokens(ctx, tenant, env)
	if err != nil {
		return nil, fmt.Errorf("provision: %w", err)
	}
	var revoked []string
	for _, t := range toks {
		if !t.RevokedAt.IsZero() && !t.RevokedAt.After(now) {
			continue // revoked already
		}
		if _, err := RevokeIdentityToken(ctx, st, t.ID, now); err != nil {
			return revoked, fmt.Errorf("provision: %w", err)
		}
		revoked = append(revoked, t.ID)
	}
	return revoked, nil
}
