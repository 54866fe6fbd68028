-- A conversation its user archived stays whole (its session, usage and
-- issues) but leaves the list unless the list is asked for archived ones.
-- NULL while not archived.
ALTER TABLE conversations ADD COLUMN archived_at BIGINT;
