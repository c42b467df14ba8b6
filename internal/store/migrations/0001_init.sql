-- The whole data model of contract §5.

CREATE TABLE projects (
    id          uuid PRIMARY KEY,
    name        text NOT NULL,
    slug        text NOT NULL UNIQUE,
    description text NOT NULL DEFAULT '',
    status      text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'archived')),
    auto_done   boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE work_items (
    id          uuid PRIMARY KEY,
    project_id  uuid NOT NULL REFERENCES projects (id),
    parent_id   uuid NULL REFERENCES work_items (id),
    kind        text NOT NULL CHECK (kind IN ('milestone', 'epic', 'task', 'subtask')),
    title       text NOT NULL,
    body        text NOT NULL DEFAULT '',
    status      text NOT NULL DEFAULT 'todo' CHECK (status IN ('todo', 'doing', 'done', 'cancelled')),
    path        text NOT NULL,
    position    integer NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX work_items_project ON work_items (project_id);
CREATE INDEX work_items_parent ON work_items (parent_id);
CREATE INDEX work_items_path ON work_items (path text_pattern_ops);

CREATE TABLE hosts (
    id                uuid PRIMARY KEY,
    name              text NOT NULL UNIQUE,
    platform          text NOT NULL DEFAULT '',
    status            text NOT NULL DEFAULT 'registered' CHECK (status IN ('registered', 'online', 'offline', 'disabled')),
    disabled          boolean NOT NULL DEFAULT false,
    instance_id       uuid NULL,
    instance_suspect  boolean NOT NULL DEFAULT false,
    last_seen_at      timestamptz NULL,
    last_online_at    timestamptz NULL,
    providers         text[] NOT NULL DEFAULT '{}',
    max_runs          integer NOT NULL DEFAULT 8,
    reported_max_runs integer NULL,
    executor          text NOT NULL DEFAULT '',
    worker_token_hash bytea NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE runs (
    id                uuid PRIMARY KEY,
    task_id           uuid NOT NULL REFERENCES work_items (id),
    project_id        uuid NOT NULL REFERENCES projects (id),
    provider          text NOT NULL,
    host_id           uuid NULL REFERENCES hosts (id),
    target_host_id    uuid NULL REFERENCES hosts (id),
    status            text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'spawning', 'running', 'exited', 'failed', 'stopped')),
    attempt           integer NOT NULL DEFAULT 1,
    max_attempts      integer NOT NULL DEFAULT 3,
    failure_reason    text NULL,
    exit_code         integer NULL,
    session_name      text NOT NULL UNIQUE,
    cwd               text NOT NULL DEFAULT '',
    prompt            text NOT NULL DEFAULT '',
    args              text[] NOT NULL DEFAULT '{}',
    pending_since     timestamptz NULL,
    next_attempt_at   timestamptz NULL,
    ever_matched      boolean NOT NULL DEFAULT false,
    offered_at        timestamptz NULL,
    started_at        timestamptz NULL,
    finished_at       timestamptz NULL,
    completed_at      timestamptz NULL,
    completion_source text NULL,
    last_progress_seq bigint NOT NULL DEFAULT 0,
    last_output_at    timestamptz NULL,
    status_source     text NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX runs_task ON runs (task_id);
CREATE INDEX runs_project ON runs (project_id);
CREATE INDEX runs_host_status ON runs (host_id, status);
CREATE INDEX runs_pending ON runs (next_attempt_at) WHERE status = 'pending';

CREATE TABLE run_attempts (
    run_id         uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    attempt        integer NOT NULL,
    host_id        uuid NULL REFERENCES hosts (id),
    offered_at     timestamptz NULL,
    started_at     timestamptz NULL,
    ended_at       timestamptz NULL,
    outcome        text NULL,
    failure_reason text NULL,
    exit_code      integer NULL,
    PRIMARY KEY (run_id, attempt)
);

-- seq is taken before commit, so transactions can commit out of seq
-- order; readers deliver only up to store.SafeSeq, never a seq that a
-- still-running transaction could undercut.
CREATE TABLE events (
    seq        bigserial PRIMARY KEY,
    topic      text NOT NULL,
    run_id     uuid NULL,
    project_id uuid NULL,
    host_id    uuid NULL,
    payload    jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_run ON events (run_id, seq) WHERE run_id IS NOT NULL;
CREATE INDEX events_created ON events (created_at);

CREATE TABLE processed_signals (
    run_id      uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    attempt     integer NOT NULL,
    kind        text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, attempt, kind)
);

-- Server-wide singletons: the signal-token secret and the journal's purge
-- horizon (the highest seq ever purged, for SSE's cursor_purged snapshot).
CREATE TABLE server_state (
    id                  boolean PRIMARY KEY DEFAULT true CHECK (id),
    signal_secret       bytea NOT NULL, -- 32 random bytes, written by the server at start
    purged_through_seq  bigint NOT NULL DEFAULT 0
);
