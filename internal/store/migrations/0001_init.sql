-- The control-plane's first schema.
--
-- Portable to SQLite and PostgreSQL: ids and strings are TEXT, integers and
-- times BIGINT (times in unix milliseconds UTC), hashes lowercase hex TEXT.
-- Statements end with a semicolon at the end of a line and contain no other
-- semicolon (see Statements in migrations.go).
--
-- Usage records and reports carry their tenant, env and conversation as plain
-- columns without foreign keys: they are facts that are billed and audited and
-- must never be refused for what they refer to.

CREATE TABLE tenants (
    id         TEXT   NOT NULL PRIMARY KEY,
    created_at BIGINT NOT NULL
);

CREATE TABLE envs (
    tenant     TEXT   NOT NULL REFERENCES tenants (id),
    name       TEXT   NOT NULL,
    worker_url TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (tenant, name)
);

CREATE TABLE users (
    id         TEXT   NOT NULL PRIMARY KEY,
    name       TEXT   NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE identity_tokens (
    id         TEXT   NOT NULL PRIMARY KEY,
    tenant     TEXT   NOT NULL,
    env        TEXT   NOT NULL,
    hash       TEXT   NOT NULL, -- SHA-256 of the token's secret, lowercase hex
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    revoked_at BIGINT,          -- NULL while valid
    FOREIGN KEY (tenant, env) REFERENCES envs (tenant, name)
);

CREATE TABLE conversations (
    id         TEXT   NOT NULL PRIMARY KEY,
    tenant     TEXT   NOT NULL,
    env        TEXT   NOT NULL,
    user_id    TEXT   NOT NULL REFERENCES users (id),
    title      TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    FOREIGN KEY (tenant, env) REFERENCES envs (tenant, name)
);

CREATE INDEX conversations_user_id ON conversations (user_id);

CREATE TABLE usage_records (
    id                          TEXT    NOT NULL PRIMARY KEY,
    tenant                      TEXT    NOT NULL,
    env                         TEXT    NOT NULL,
    conversation_id             TEXT    NOT NULL,
    user_id                     TEXT    NOT NULL,
    model                       TEXT    NOT NULL,
    status                      BIGINT  NOT NULL,
    streamed                    BOOLEAN NOT NULL,
    input_tokens                BIGINT  NOT NULL,
    output_tokens               BIGINT  NOT NULL,
    cache_creation_input_tokens BIGINT  NOT NULL,
    cache_read_input_tokens     BIGINT  NOT NULL,
    started_at                  BIGINT  NOT NULL,
    duration_us                 BIGINT  NOT NULL
);

CREATE INDEX usage_records_conversation_id ON usage_records (conversation_id);

CREATE TABLE reports (
    tenant          TEXT   NOT NULL,
    env             TEXT   NOT NULL,
    idempotency_key TEXT   NOT NULL,
    kind            TEXT   NOT NULL,
    conversation_id TEXT   NOT NULL,
    turn_id         TEXT   NOT NULL,
    time            BIGINT NOT NULL,
    body            TEXT   NOT NULL, -- the report as JSON
    received_at     BIGINT NOT NULL,
    PRIMARY KEY (tenant, env, idempotency_key)
);

CREATE INDEX reports_conversation_id ON reports (conversation_id);
