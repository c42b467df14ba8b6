-- The operator token belongs to the database, like the signal secret: every
-- pam serve of this database accepts the same one, so a standby that takes
-- over keeps the operator's credential. NULL until the first serve stores
-- it (an existing <data>/token adopted, or a new one made).
ALTER TABLE server_state ADD COLUMN operator_token text NULL
    CHECK (operator_token ~ '^[0-9a-f]{32}$');
