-- Named API tokens with a role (docs/architecture.md#security-model): admin
-- (everything), operator (projects, items, runs and their terminal; not
-- hosts, tokens or notifications), viewer (reads, the event stream, pane
-- watching). Only the SHA-256 of a secret is stored; the server looks a
-- presented secret up by that hash. A revoked token keeps its row (its name
-- stays in the journal's actors) with revoked_at set. The operator token of
-- server_state is adopted as the admin token named admin by the first serve
-- that starts on this schema.
CREATE TABLE api_tokens (
    id           uuid PRIMARY KEY,
    name         text NOT NULL UNIQUE CHECK (char_length(name) BETWEEN 1 AND 200),
    role         text NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
    secret_hash  bytea NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz NULL,
    revoked_at   timestamptz NULL
);
CREATE UNIQUE INDEX api_tokens_secret ON api_tokens (secret_hash);
