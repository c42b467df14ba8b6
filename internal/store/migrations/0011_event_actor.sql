-- Who caused an event (docs/api.md#events): a token's name, agent:<first 8
-- hex of the run id> for pam's tools for the agent (pam mcp), pam for its
-- own decisions; null for workers and signals, and for every event
-- journaled before this column.
ALTER TABLE events ADD COLUMN actor text NULL;
