-- A removed host stays in the history (docs/architecture.md#host-status): runs,
-- their attempts and offers keep the id of the host that ran them, and
-- removed_hosts keeps its name. The foreign keys that nulled those ids (or
-- deleted the offers) when the host row went are dropped; a run can still
-- not be placed on a host being removed, because placement locks the host
-- rows it offers to and removal locks the host row before it counts the
-- host's active runs.
CREATE TABLE removed_hosts (
    id         uuid PRIMARY KEY,
    name       text NOT NULL,
    removed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX removed_hosts_name ON removed_hosts (name);
ALTER TABLE runs DROP CONSTRAINT runs_host_id_fkey;
ALTER TABLE run_attempts DROP CONSTRAINT run_attempts_host_id_fkey;
ALTER TABLE run_offers DROP CONSTRAINT run_offers_host_id_fkey;
