-- Accounts: which users belong to which tenants (and, optionally, to one
-- env of a tenant) in which role, the OpenID Connect identities that log
-- them in, their browser sessions and their API tokens.
--
-- A membership's env is '' when it covers every env of the tenant: a
-- primary key cannot hold NULL, and '' is no env's name. Its existence is
-- checked by the store when it is set, not by a foreign key, which the
-- tenant-wide row could not satisfy.

CREATE TABLE memberships (
    user_id    TEXT   NOT NULL REFERENCES users (id),
    tenant     TEXT   NOT NULL REFERENCES tenants (id),
    env        TEXT   NOT NULL,
    role       TEXT   NOT NULL, -- member or tenant-admin
    created_at BIGINT NOT NULL,
    PRIMARY KEY (user_id, tenant, env)
);

CREATE INDEX memberships_tenant ON memberships (tenant);

CREATE TABLE oidc_identities (
    issuer     TEXT   NOT NULL,
    subject    TEXT   NOT NULL,
    user_id    TEXT   NOT NULL REFERENCES users (id),
    created_at BIGINT NOT NULL,
    PRIMARY KEY (issuer, subject)
);

CREATE INDEX oidc_identities_user_id ON oidc_identities (user_id);

-- A browser session is found by the SHA-256 of the cookie's random id: the
-- id itself is never stored.
CREATE TABLE browser_sessions (
    hash         TEXT   NOT NULL PRIMARY KEY,
    user_id      TEXT   NOT NULL REFERENCES users (id),
    created_at   BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL -- the absolute end, whatever the activity
);

CREATE INDEX browser_sessions_user_id ON browser_sessions (user_id);

CREATE TABLE api_tokens (
    id           TEXT   NOT NULL PRIMARY KEY,
    user_id      TEXT   NOT NULL REFERENCES users (id),
    name         TEXT   NOT NULL,
    hash         TEXT   NOT NULL, -- SHA-256 of the token's secret, lowercase hex
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT,          -- NULL: never
    last_used_at BIGINT,          -- NULL until first used
    revoked_at   BIGINT           -- NULL while valid
);

CREATE INDEX api_tokens_user_id ON api_tokens (user_id);

CREATE INDEX conversations_tenant ON conversations (tenant);
