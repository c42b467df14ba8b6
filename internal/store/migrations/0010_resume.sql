-- Resume and continue (docs/architecture.md#resume-and-continue):
-- hosts.resumable names the providers whose catalog entry on that host
-- can resume a conversation (resume_args), as its worker reports at
-- registration; NULL while a worker has not said (the server then knows
-- the built-ins only). A run's continuations are found by the run they
-- continue.
ALTER TABLE hosts ADD COLUMN resumable text[] NULL;
CREATE INDEX runs_continues_run ON runs (continues_run_id) WHERE continues_run_id IS NOT NULL;
