package sqlcore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/talkide/platform/internal/store"
)

// Accounts: memberships, OpenID Connect identities, browser sessions and
// API tokens. Hashes are lowercase hex, as the identity tokens'.

const membershipColumns = `user_id, tenant, env, role, created_at, source`

// Membership sources, as the column holds them.
const (
	sourceAdmin = "admin"
	sourceClaim = "claim"
)

const (
	// putMembership changes the role and source of an existing membership
	// and keeps its created_at.
	putMembership = `INSERT INTO memberships (` + membershipColumns + `) VALUES ($1, $2, $3, $4, $5, $6)
	ON CONFLICT (user_id, tenant, env) DO UPDATE SET role = excluded.role, source = excluded.source`

	getMembership = `SELECT ` + membershipColumns + ` FROM memberships WHERE user_id = $1 AND tenant = $2 AND env = $3`

	deleteMembership = `DELETE FROM memberships WHERE user_id = $1 AND tenant = $2 AND env = $3`

	envExists = `SELECT name FROM envs WHERE tenant = $1 AND name = $2`
)

// listMemberships: by user, by tenant, or by both; ordered by tenant, env,
// user.
func listMemberships(d Dialect, where string) string {
	return `SELECT ` + membershipColumns + ` FROM memberships WHERE ` + where +
		` ORDER BY tenant` + d.ByBytes + `, env` + d.ByBytes + `, user_id` + d.ByBytes
}

func scanMembership(r Row) (store.Membership, error) {
	var (
		m       store.Membership
		role    string
		created int64
		source  string
	)
	if err := r.Scan(&m.UserID, &m.Tenant, &m.Env, &role, &created, &source); err != nil {
		return store.Membership{}, err
	}
	m.Role = store.Role(role)
	m.FromClaim = source == sourceClaim
	m.CreatedAt = FromMillis(created)
	return m, nil
}

// PutMembership implements store.Store.
func (t *Tables) PutMembership(ctx context.Context, m store.Membership) (store.Membership, error) {
	if !m.Role.Valid() {
		return store.Membership{}, fmt.Errorf("%s: put membership: role %q is neither %s nor %s", t.name, m.Role, store.RoleMember, store.RoleTenantAdmin)
	}
	var stored store.Membership
	err := t.db.InTx(ctx, func(tx Tx) error {
		if m.Env != "" {
			var name string
			if err := tx.QueryRow(ctx, envExists, m.Tenant, m.Env).Scan(&name); err != nil {
				if errors.Is(err, t.d.NoRows) {
					return fmt.Errorf("%w: no env %s/%s", store.ErrNotFound, m.Tenant, m.Env)
				}
				return err
			}
		}
		source := sourceAdmin
		if m.FromClaim {
			source = sourceClaim
		}
		if _, err := tx.Exec(ctx, putMembership, m.UserID, m.Tenant, m.Env, string(m.Role), Millis(m.CreatedAt), source); err != nil {
			return t.constraint(err)
		}
		var err error
		stored, err = scanMembership(tx.QueryRow(ctx, getMembership, m.UserID, m.Tenant, m.Env))
		return err
	})
	if err != nil {
		return store.Membership{}, fmt.Errorf("%s: put membership of %s in %s/%s: %w", t.name, m.UserID, m.Tenant, m.Env, err)
	}
	return stored, nil
}

// DeleteMembership implements store.Store.
func (t *Tables) DeleteMembership(ctx context.Context, userID, tenant, env string) error {
	n, err := t.db.Exec(ctx, deleteMembership, userID, tenant, env)
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("%s: delete membership of %s in %s/%s: %w", t.name, userID, tenant, env, err)
	}
	return nil
}

// ListMemberships implements store.Store.
func (t *Tables) ListMemberships(ctx context.Context, userID, tenant string) ([]store.Membership, error) {
	var (
		q    string
		args []any
	)
	switch {
	case userID != "" && tenant != "":
		q, args = t.listMembershipsOfUserIn, []any{userID, tenant}
	case userID != "":
		q, args = t.listMembershipsOfUser, []any{userID}
	case tenant != "":
		q, args = t.listMembershipsOfTenant, []any{tenant}
	default:
		return nil, fmt.Errorf("%s: list memberships: a user or a tenant is required", t.name)
	}
	ms, err := collect(ctx, t.db, scanMembership, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: list memberships of %q in %q: %w", t.name, userID, tenant, err)
	}
	return ms, nil
}

// listTenantConversations and listEnvConversations order as
// listConversations.
func listTenantConversations(d Dialect, where string) string {
	return `SELECT ` + conversationColumns + ` FROM conversations
	WHERE ` + where + byActivity(d)
}

// ListTenantConversations implements store.Store.
func (t *Tables) ListTenantConversations(ctx context.Context, tenant, env string) ([]store.Conversation, error) {
	q, args := t.listTenantConversations, []any{tenant}
	if env != "" {
		q, args = t.listEnvConversations, []any{tenant, env}
	}
	cs, err := collect(ctx, t.db, scanConversation, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: list conversations of %s/%s: %w", t.name, tenant, env, err)
	}
	return cs, nil
}

// OpenID Connect identities.

const oidcColumns = `issuer, subject, user_id, created_at`

const (
	insertOIDC = `INSERT INTO oidc_identities (` + oidcColumns + `) VALUES ($1, $2, $3, $4)
	ON CONFLICT (issuer, subject) DO NOTHING`

	getOIDC = `SELECT ` + oidcColumns + ` FROM oidc_identities WHERE issuer = $1 AND subject = $2`
)

func scanOIDC(r Row) (store.OIDCIdentity, error) {
	var (
		id      store.OIDCIdentity
		created int64
	)
	if err := r.Scan(&id.Issuer, &id.Subject, &id.UserID, &created); err != nil {
		return store.OIDCIdentity{}, err
	}
	id.CreatedAt = FromMillis(created)
	return id, nil
}

// PutOIDCIdentity implements store.Store.
func (t *Tables) PutOIDCIdentity(ctx context.Context, id store.OIDCIdentity) (store.OIDCIdentity, bool, error) {
	var (
		stored  store.OIDCIdentity
		created bool
	)
	err := t.db.InTx(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, insertOIDC, id.Issuer, id.Subject, id.UserID, Millis(id.CreatedAt))
		if err != nil {
			return t.constraint(err)
		}
		if n == 1 {
			stored, created = id, true
			stored.CreatedAt = ms(id.CreatedAt)
			return nil
		}
		stored, err = scanOIDC(tx.QueryRow(ctx, getOIDC, id.Issuer, id.Subject))
		return err
	})
	if err != nil {
		return store.OIDCIdentity{}, false, fmt.Errorf("%s: put OIDC identity of %s: %w", t.name, id.UserID, err)
	}
	return stored, created, nil
}

// GetOIDCIdentity implements store.Store.
func (t *Tables) GetOIDCIdentity(ctx context.Context, issuer, subject string) (store.OIDCIdentity, error) {
	id, err := scanOIDC(t.db.QueryRow(ctx, getOIDC, issuer, subject))
	if err != nil {
		return store.OIDCIdentity{}, fmt.Errorf("%s: get OIDC identity: %w", t.name, t.notFound(err))
	}
	return id, nil
}

// Browser sessions.

const browserSessionColumns = `hash, user_id, created_at, last_seen_at, expires_at`

const (
	insertBrowserSession = `INSERT INTO browser_sessions (` + browserSessionColumns + `) VALUES ($1, $2, $3, $4, $5)`

	getBrowserSession = `SELECT ` + browserSessionColumns + ` FROM browser_sessions WHERE hash = $1`

	touchBrowserSession = `UPDATE browser_sessions
	SET last_seen_at = CASE WHEN last_seen_at < $1 THEN $1 ELSE last_seen_at END WHERE hash = $2`

	deleteBrowserSession = `DELETE FROM browser_sessions WHERE hash = $1`

	deleteBrowserSessions = `DELETE FROM browser_sessions WHERE expires_at <= $1 OR last_seen_at < $2`
)

func hexHash(h [32]byte) string { return hex.EncodeToString(h[:]) }

func scanHash(s string, h *[32]byte) error {
	if len(s) != hex.EncodedLen(len(h)) {
		return fmt.Errorf("stored hash has %d hex digits", len(s))
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return fmt.Errorf("stored hash: %w", err)
	}
	return nil
}

func scanBrowserSession(r Row) (store.BrowserSession, error) {
	var (
		s                      store.BrowserSession
		hash                   string
		created, seen, expires int64
	)
	if err := r.Scan(&hash, &s.UserID, &created, &seen, &expires); err != nil {
		return store.BrowserSession{}, err
	}
	if err := scanHash(hash, &s.Hash); err != nil {
		return store.BrowserSession{}, err
	}
	s.CreatedAt, s.LastSeenAt, s.ExpiresAt = FromMillis(created), FromMillis(seen), FromMillis(expires)
	return s, nil
}

// CreateBrowserSession implements store.Store.
func (t *Tables) CreateBrowserSession(ctx context.Context, s store.BrowserSession) error {
	if _, err := t.db.Exec(ctx, insertBrowserSession, hexHash(s.Hash), s.UserID,
		Millis(s.CreatedAt), Millis(s.LastSeenAt), Millis(s.ExpiresAt)); err != nil {
		return fmt.Errorf("%s: create browser session of %s: %w", t.name, s.UserID, t.constraint(err))
	}
	return nil
}

// GetBrowserSession implements store.Store.
func (t *Tables) GetBrowserSession(ctx context.Context, hash [32]byte) (store.BrowserSession, error) {
	s, err := scanBrowserSession(t.db.QueryRow(ctx, getBrowserSession, hexHash(hash)))
	if err != nil {
		return store.BrowserSession{}, fmt.Errorf("%s: get browser session: %w", t.name, t.notFound(err))
	}
	return s, nil
}

// TouchBrowserSession implements store.Store.
func (t *Tables) TouchBrowserSession(ctx context.Context, hash [32]byte, at time.Time) error {
	n, err := t.db.Exec(ctx, touchBrowserSession, Millis(at), hexHash(hash))
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("%s: touch browser session: %w", t.name, err)
	}
	return nil
}

// DeleteBrowserSession implements store.Store.
func (t *Tables) DeleteBrowserSession(ctx context.Context, hash [32]byte) error {
	if _, err := t.db.Exec(ctx, deleteBrowserSession, hexHash(hash)); err != nil {
		return fmt.Errorf("%s: delete browser session: %w", t.name, err)
	}
	return nil
}

// DeleteBrowserSessions implements store.Store.
func (t *Tables) DeleteBrowserSessions(ctx context.Context, before, idleBefore time.Time) (int64, error) {
	n, err := t.db.Exec(ctx, deleteBrowserSessions, Millis(before), Millis(idleBefore))
	if err != nil {
		return 0, fmt.Errorf("%s: delete expired browser sessions: %w", t.name, err)
	}
	return n, nil
}

// API tokens.

const apiTokenColumns = `id, user_id, name, hash, created_at, expires_at, last_used_at, revoked_at`

const (
	insertAPIToken = `INSERT INTO api_tokens (` + apiTokenColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`

	getAPIToken = `SELECT ` + apiTokenColumns + ` FROM api_tokens WHERE id = $1`

	revokeAPIToken = `UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2`

	touchAPIToken = `UPDATE api_tokens
	SET last_used_at = CASE WHEN last_used_at IS NULL OR last_used_at < $1 THEN $1 ELSE last_used_at END WHERE id = $2`
)

func listAPITokens(d Dialect, where string) string {
	return `SELECT ` + apiTokenColumns + ` FROM api_tokens` + where + ` ORDER BY created_at, id` + d.ByBytes
}

func scanAPIToken(r Row) (store.APIToken, error) {
	var (
		tok                    store.APIToken
		hash                   string
		created                int64
		expires, used, revoked *int64
	)
	if err := r.Scan(&tok.ID, &tok.UserID, &tok.Name, &hash, &created, &expires, &used, &revoked); err != nil {
		return store.APIToken{}, err
	}
	if err := scanHash(hash, &tok.Hash); err != nil {
		return store.APIToken{}, err
	}
	tok.CreatedAt = FromMillis(created)
	tok.ExpiresAt, tok.LastUsedAt, tok.RevokedAt = fromNullMillis(expires), fromNullMillis(used), fromNullMillis(revoked)
	return tok, nil
}

// AddAPIToken implements store.Store.
func (t *Tables) AddAPIToken(ctx context.Context, tok store.APIToken) error {
	if _, err := t.db.Exec(ctx, insertAPIToken, tok.ID, tok.UserID, tok.Name, hexHash(tok.Hash), Millis(tok.CreatedAt),
		nullMillis(tok.ExpiresAt), nullMillis(tok.LastUsedAt), nullMillis(tok.RevokedAt)); err != nil {
		return fmt.Errorf("%s: add API token %s of %s: %w", t.name, tok.ID, tok.UserID, t.constraint(err))
	}
	return nil
}

// GetAPIToken implements store.Store.
func (t *Tables) GetAPIToken(ctx context.Context, id string) (store.APIToken, error) {
	return getByID(ctx, t, scanAPIToken, getAPIToken, "API token", id)
}

// ListAPITokens implements store.Store.
func (t *Tables) ListAPITokens(ctx context.Context, userID string) ([]store.APIToken, error) {
	q, args := t.listAllAPITokens, []any(nil)
	if userID != "" {
		q, args = t.listUserAPITokens, []any{userID}
	}
	toks, err := collect(ctx, t.db, scanAPIToken, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: list API tokens of %q: %w", t.name, userID, err)
	}
	return toks, nil
}

// RevokeAPIToken implements store.Store.
func (t *Tables) RevokeAPIToken(ctx context.Context, id string, at time.Time) error {
	return t.revoke(ctx, revokeAPIToken, "API token", id, at)
}

// TouchAPIToken implements store.Store.
func (t *Tables) TouchAPIToken(ctx context.Context, id string, at time.Time) error {
	n, err := t.db.Exec(ctx, touchAPIToken, Millis(at), id)
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("%s: touch API token %s: %w", t.name, id, err)
	}
	return nil
}
