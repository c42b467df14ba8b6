-- When a run entered spawning (for PAM_SPAWN_TIMEOUT), and the host an
-- offer went to (kept when the offer is withdrawn, so a late ack from that
-- host is recognised as stale).
ALTER TABLE runs ADD COLUMN spawning_at timestamptz NULL;
CREATE INDEX runs_active_host ON runs (host_id) WHERE status IN ('pending', 'spawning', 'running');

-- Every offer of every attempt: a host offered a run keeps the right to be
-- told "stale_offer" after its offer was withdrawn and re-made elsewhere.
CREATE TABLE run_offers (
    run_id     uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    attempt    integer NOT NULL,
    host_id    uuid NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
    offered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, attempt, host_id)
);
CREATE INDEX run_offers_host ON run_offers (host_id);
