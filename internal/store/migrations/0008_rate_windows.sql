-- Fixed-window counters of the browser API's rate limits (logins, one API
-- token's requests, refused credentials), shared by every control-plane
-- replica on the database, so that a client spreading its requests over
-- the replicas gets no more than one replica would give it. One row per
-- limit, key and window; window_start is unix milliseconds. A SQLite store
-- has one process and counts in memory: there the table stays empty.
CREATE TABLE rate_windows (
    name         TEXT NOT NULL,
    rate_key     TEXT NOT NULL,
    window_start BIGINT NOT NULL,
    hits         BIGINT NOT NULL,
    PRIMARY KEY (name, rate_key, window_start)
);
CREATE INDEX rate_windows_by_start ON rate_windows (window_start);
