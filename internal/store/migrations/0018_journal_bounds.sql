-- Nothing a run or a worker sends grows the journal without bound
-- (docs/architecture.md#bounded-journal).

-- run.progress is journaled at most once a second per run: the time of
-- the last one journaled, how many applied since were not journaled on
-- their own, and the newest of those (journaled by the trailing flush
-- once the second has passed, so the last progress is never lost).
ALTER TABLE runs ADD COLUMN progress_journaled_at timestamptz NULL,
	ADD COLUMN progress_coalesced int NOT NULL DEFAULT 0,
	ADD COLUMN progress_held jsonb NULL;
CREATE INDEX runs_progress_held ON runs (progress_journaled_at) WHERE progress_held IS NOT NULL;

-- A worker's orphan_detected and stale run_state reports are journaled
-- once per (host, run, kind) an hour, and counted in between. run_key is
-- the run id as the worker sent it ('' for an orphan that names none).
CREATE TABLE report_limits (
	host_id uuid NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
	run_key text NOT NULL,
	kind text NOT NULL,
	journaled_at timestamptz NOT NULL,
	repeats int NOT NULL DEFAULT 0,
	last_repeats int NOT NULL DEFAULT 0,
	PRIMARY KEY (host_id, run_key, kind)
);

-- A run.workspace_pushed is journaled only for a push the server asked
-- for: each request is a row, taken by the worker's answer.
CREATE TABLE push_requests (
	id bigserial PRIMARY KEY,
	run_id uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	host_id uuid NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
	requested_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX push_requests_run ON push_requests (run_id, host_id, requested_at);
