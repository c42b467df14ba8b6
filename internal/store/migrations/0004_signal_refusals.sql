-- Signals the ingest set aside without processing them (stale_attempt,
-- stale_offer, ignored after host_lost), one row per (run, the signal's
-- attempt, kind, result): the first is journaled, the rest only counted
-- here, so an old token cannot grow the journal (contract §16).
CREATE TABLE signal_refusals (
    run_id   uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    attempt  integer NOT NULL,
    kind     text NOT NULL,
    result   text NOT NULL,
    count    bigint NOT NULL DEFAULT 1,
    first_at timestamptz NOT NULL DEFAULT now(),
    last_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, attempt, kind, result)
);
