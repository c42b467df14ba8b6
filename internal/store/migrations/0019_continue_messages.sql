-- Continue when a limit resets (docs/architecture.md#continue-when-a-limit-resets):
-- hosts.continue_messages is each usable provider's continue_message in
-- that host's catalog, {"<provider>": "<text>"}, as its worker reports at
-- registration; NULL while a worker has not said (the server then sends
-- the built-ins' message).
ALTER TABLE hosts ADD COLUMN continue_messages jsonb NULL;
