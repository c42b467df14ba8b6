-- Continue when a limit resets (docs/architecture.md#continue-when-a-limit-resets):
-- a project's running agents that stopped at a usage limit are sent their
-- provider's continue message once the limit resets, unless this is off.
ALTER TABLE projects ADD COLUMN auto_continue boolean NOT NULL DEFAULT true;
