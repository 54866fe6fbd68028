-- A slice of a limit that one control-plane replica admits calls from in
-- memory (internal/budget/lease.go) is a reservation too, but not a call:
-- calls says how many calls a reservation counts for under a concurrency
-- limit, 1 for a call's own, 0 for a slice.
ALTER TABLE budget_reservations ADD COLUMN calls BIGINT NOT NULL DEFAULT 1;
