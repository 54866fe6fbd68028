-- Where a membership comes from: 'admin' (talkide admin user add, the
-- operator API) or 'claim' (an OpenID Connect login's tenants claim). A
-- login manages only the memberships its claim made, so one an operator
-- added outlives a login whose claim lacks it.
ALTER TABLE memberships ADD COLUMN source TEXT NOT NULL DEFAULT 'admin';
-- A tenant's model calls, newest first, a page at a time.
CREATE INDEX usage_records_tenant_started ON usage_records (tenant, env, started_at);
