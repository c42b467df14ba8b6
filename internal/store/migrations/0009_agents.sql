-- Agents (docs/architecture.md#attention, docs/agents.md): a run can wait
-- on a usage limit (rate_limited); attention_detail is what the person is
-- asked, {source, text, choices:[{key,label}], resets_at}, or null;
-- last_input_at is the latest input into the live run (its start, keys,
-- a message, an attach): a completion after it means the agent waits for
-- a person, not that it hangs. agent_session_id is the CLI's own
-- conversation id as its hooks report it; continues_run_id links a
-- continuation to the run it continues.
ALTER TABLE runs DROP CONSTRAINT runs_attention_check;
ALTER TABLE runs ADD CONSTRAINT runs_attention_check
	CHECK (attention IN ('none', 'needs_input', 'rate_limited', 'idle'));
ALTER TABLE runs ADD COLUMN attention_detail jsonb NULL;
ALTER TABLE runs ADD COLUMN last_input_at timestamptz NULL;
ALTER TABLE runs ADD COLUMN agent_session_id text NULL;
ALTER TABLE runs ADD COLUMN continues_run_id uuid NULL REFERENCES runs (id) ON DELETE SET NULL;
