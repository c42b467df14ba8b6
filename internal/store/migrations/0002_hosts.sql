-- The host registry (contract §5, §7, §10).

-- The instance id a suspect host last reported: clear-suspect accepts it
-- as the pinned instance_id.
ALTER TABLE hosts ADD COLUMN reported_instance_id uuid NULL;

-- Workers authenticate by the SHA-256 of their token: one lookup by index.
CREATE UNIQUE INDEX hosts_token ON hosts (worker_token_hash);

-- disabled is sticky (seed 030): while it is set, status reads disabled
-- whatever a heartbeat, registration or the offline sweep writes. Enforced
-- here so that no code path can forget it; only clearing disabled (enable)
-- lets another status through.
CREATE FUNCTION hosts_disabled_sticky() RETURNS trigger AS $$
BEGIN
    IF NEW.disabled THEN
        NEW.status := 'disabled';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER hosts_disabled_sticky BEFORE INSERT OR UPDATE ON hosts
    FOR EACH ROW EXECUTE FUNCTION hosts_disabled_sticky();
