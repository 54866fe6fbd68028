-- A retired env keeps its rows (conversations, usage, tokens) but gets no
-- worker: the Kubernetes provisioner leaves it alone, and adding the env
-- again clears the mark. NULL while the env is live.
ALTER TABLE envs ADD COLUMN retired_at BIGINT;
