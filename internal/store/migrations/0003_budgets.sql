-- Budgets (internal/budget, docs/budgets.md): limits, the reservations of
-- calls in flight, usage counters per subject and bucket, and the ledger.
--
-- A subject is a scope and an id: user and a user id, tenant and a tenant,
-- env and "tenant/env". Money is BIGINT nanodollars, times BIGINT unix
-- milliseconds UTC. Like usage_records, none of these rows has a foreign
-- key: what was spent is a fact and is never refused for what it names.

CREATE TABLE budget_limits (
    scope      TEXT    NOT NULL,
    subject    TEXT    NOT NULL,
    kind       TEXT    NOT NULL, -- spend_per_day, spend_per_5h, requests_per_minute, ...
    maximum    BIGINT  NOT NULL, -- nanodollars for spending limits, a count otherwise
    hard       BOOLEAN NOT NULL, -- cut streams off at the limit
    updated_at BIGINT  NOT NULL,
    PRIMARY KEY (scope, subject, kind)
);

-- A call in flight holds its estimated cost here until it is settled. A
-- reservation whose expires_at has passed holds nothing: its process died.
CREATE TABLE budget_reservations (
    id         TEXT   NOT NULL PRIMARY KEY, -- the call's id
    user_id    TEXT   NOT NULL,
    tenant     TEXT   NOT NULL,
    env        TEXT   NOT NULL,
    cost       BIGINT NOT NULL,
    tokens     BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);

CREATE INDEX budget_reservations_user ON budget_reservations (user_id);

CREATE INDEX budget_reservations_env ON budget_reservations (tenant, env);

CREATE INDEX budget_reservations_expires ON budget_reservations (expires_at);

-- Settled usage per subject: day buckets (kept, for reports and the
-- calendar limits), five-minute buckets (the rolling five hours) and minute
-- buckets (requests admitted, for requests per minute).
CREATE TABLE budget_usage (
    scope        TEXT   NOT NULL,
    subject      TEXT   NOT NULL,
    bucket       TEXT   NOT NULL, -- day, 5m or minute
    period_start BIGINT NOT NULL,
    cost         BIGINT NOT NULL,
    tokens       BIGINT NOT NULL,
    requests     BIGINT NOT NULL,
    PRIMARY KEY (scope, subject, bucket, period_start)
);

CREATE INDEX budget_usage_bucket ON budget_usage (bucket, period_start);

-- One row per forwarded call, keyed by the gateway's request id so that a
-- retried settlement never charges twice.
CREATE TABLE budget_ledger (
    id                    TEXT    NOT NULL PRIMARY KEY,
    tenant                TEXT    NOT NULL,
    env                   TEXT    NOT NULL,
    user_id               TEXT    NOT NULL,
    conversation_id       TEXT    NOT NULL,
    model                 TEXT    NOT NULL,
    status                BIGINT  NOT NULL,
    streamed              BOOLEAN NOT NULL,
    estimated             BOOLEAN NOT NULL,
    input_tokens          BIGINT  NOT NULL,
    output_tokens         BIGINT  NOT NULL,
    cache_write_5m_tokens BIGINT  NOT NULL,
    cache_write_1h_tokens BIGINT  NOT NULL,
    cache_read_tokens     BIGINT  NOT NULL,
    web_search_requests   BIGINT  NOT NULL,
    web_fetch_requests    BIGINT  NOT NULL,
    cost                  BIGINT  NOT NULL,
    reserved              BIGINT  NOT NULL,
    request_bytes         BIGINT  NOT NULL,
    started_at            BIGINT  NOT NULL,
    settled_at            BIGINT  NOT NULL
);

CREATE INDEX budget_ledger_user ON budget_ledger (user_id, settled_at);

CREATE INDEX budget_ledger_env ON budget_ledger (tenant, env, settled_at);

CREATE INDEX budget_ledger_conversation ON budget_ledger (conversation_id, settled_at);

CREATE INDEX budget_ledger_settled ON budget_ledger (settled_at);
