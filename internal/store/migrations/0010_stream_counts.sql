-- The browser event streams each control-plane replica has open, by user
-- and by conversation, so that the per-user and per-conversation caps count
-- across the replicas sharing the database (internal/controlplane,
-- streamshare.go). Each replica publishes its own counts (non-zero ones
-- only) and beats its heartbeat every few seconds; the others add them to
-- their own. A replica whose heartbeat is older than the TTL is ignored and
-- then swept with its counts, so a replica that dies leaks nothing. Rows
-- are bounded by the replicas alive within the TTL times the users and
-- conversations with a stream open on each.
CREATE TABLE stream_replicas (
    replica TEXT NOT NULL PRIMARY KEY,
    seen_at BIGINT NOT NULL
);
CREATE INDEX stream_replicas_by_seen ON stream_replicas (seen_at);
-- kind is 'user' or 'conversation', subject that user's or conversation's
-- id, streams the replica's open streams of it (at least 1).
CREATE TABLE stream_counts (
    replica TEXT NOT NULL,
    kind    TEXT NOT NULL,
    subject TEXT NOT NULL,
    streams BIGINT NOT NULL,
    PRIMARY KEY (replica, kind, subject)
);
