-- Workspaces: a git worktree per run (docs/architecture.md#workspaces).
-- projects.repo is {url, base} or null. runs.workspace is the worktree a
-- worker made, {path, branch, base_commit}, or null; workspace_host_id is
-- the host that holds it; workspace_mode is what POST /runs asked for
-- (worktree or none), read when the run is dispatched.
ALTER TABLE projects ADD COLUMN repo jsonb NULL;
ALTER TABLE runs ADD COLUMN workspace jsonb NULL;
ALTER TABLE runs ADD COLUMN workspace_host_id uuid NULL REFERENCES hosts (id) ON DELETE SET NULL;
ALTER TABLE runs ADD COLUMN workspace_mode text NOT NULL DEFAULT 'none'
	CHECK (workspace_mode IN ('worktree', 'none'));
