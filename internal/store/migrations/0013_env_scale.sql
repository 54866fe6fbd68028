-- How many worker replicas a tenant-env runs: a fixed count when
-- max_replicas equals min_replicas, else an autoscaled range whose target
-- is turns_per_replica running turns on each replica. 0 in any column is
-- the default (store.EnvScale), so that every env from before keeps its
-- single worker.
ALTER TABLE envs ADD COLUMN min_replicas BIGINT NOT NULL DEFAULT 0;
ALTER TABLE envs ADD COLUMN max_replicas BIGINT NOT NULL DEFAULT 0;
ALTER TABLE envs ADD COLUMN turns_per_replica BIGINT NOT NULL DEFAULT 0;
