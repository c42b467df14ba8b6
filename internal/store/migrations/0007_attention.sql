-- Attention (docs/architecture.md#attention): whether a live run waits
-- for a person. Only a running run has one other than 'none'; every
-- change is journaled as run.attention. attention_since is when it last
-- became other than 'none'.
ALTER TABLE runs ADD COLUMN attention text NOT NULL DEFAULT 'none' CHECK (attention IN ('none', 'needs_input', 'idle'));
ALTER TABLE runs ADD COLUMN attention_since timestamptz NULL;
-- GET /runs?attention=any: what waits for a person, newest first.
CREATE INDEX runs_attention ON runs (created_at DESC) WHERE attention <> 'none';
