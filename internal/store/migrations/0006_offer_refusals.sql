-- When a host refused an offer (run_dispatch_ack accepted=false): that
-- host is not offered that run's attempt again for PAM_DISPATCH_ACK_TIMEOUT
-- (docs/architecture.md#central-duties), so that a host that cannot take a
-- run (full, or its provider binary gone) is not offered it again and again
-- in a tight loop. Kept in the database, not in the dispatcher's memory,
-- so that a standby that takes over keeps the spacing. A new offer to the
-- host clears it.
ALTER TABLE run_offers ADD COLUMN refused_at timestamptz NULL;
