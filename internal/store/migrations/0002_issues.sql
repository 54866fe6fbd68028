-- Issues the agent files in a conversation (its own tracker: docs/contract.md#issues), and their comments.
--
-- Portable to SQLite and PostgreSQL, by the rules of 0001_init.sql.
--
-- Unlike usage records and reports, an issue is not a fact about the past
-- but a thing users read and act on: it refers to its tenant-env, its
-- conversation and that conversation's user by foreign keys, and the
-- control-plane checks all three before it stores one.
--
-- An issue's idempotency key is unique per tenant-env, a comment's per
-- issue, so a worker that retries after a lost answer files nothing twice.
-- Labels are a JSON array of strings. Comments are ordered by seq, which
-- counts from 1 within each issue.

CREATE TABLE issues (
    id              TEXT   NOT NULL PRIMARY KEY,
    tenant          TEXT   NOT NULL,
    env             TEXT   NOT NULL,
    idempotency_key TEXT   NOT NULL,
    conversation_id TEXT   NOT NULL REFERENCES conversations (id),
    user_id         TEXT   NOT NULL REFERENCES users (id),
    turn_id         TEXT   NOT NULL,
    title           TEXT   NOT NULL,
    body            TEXT   NOT NULL,
    severity        TEXT   NOT NULL,
    labels          TEXT   NOT NULL,
    status          TEXT   NOT NULL,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    FOREIGN KEY (tenant, env) REFERENCES envs (tenant, name),
    UNIQUE (tenant, env, idempotency_key)
);

CREATE INDEX issues_conversation_id ON issues (conversation_id, created_at);

CREATE TABLE issue_comments (
    id              TEXT   NOT NULL PRIMARY KEY,
    issue_id        TEXT   NOT NULL REFERENCES issues (id),
    seq             BIGINT NOT NULL,
    idempotency_key TEXT   NOT NULL,
    turn_id         TEXT   NOT NULL,
    body            TEXT   NOT NULL,
    status          TEXT   NOT NULL, -- the status the comment set, empty for none
    created_at      BIGINT NOT NULL,
    UNIQUE (issue_id, idempotency_key),
    UNIQUE (issue_id, seq)
);
