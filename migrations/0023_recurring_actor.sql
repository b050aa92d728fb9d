-- Who fired a recurring task by hand, and why (a run-now from the API, the dashboard, MCP or the
-- CLI): the caller's actor and reason on its ledger row. Scheduled fires leave both null, as do
-- the manual fires recorded before this migration. Adding nullable columns without a default
-- rewrites nothing.
ALTER TABLE {{schema}}.recurring_executions
  ADD COLUMN actor text,
  ADD COLUMN reason text;
