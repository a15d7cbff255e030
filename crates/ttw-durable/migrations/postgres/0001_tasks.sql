-- Durable delayed tasks, PostgreSQL form. Times are milliseconds since the Unix epoch.
CREATE TABLE ttw_meta (
    key   TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);

CREATE TABLE ttw_tasks (
    id              BIGSERIAL PRIMARY KEY,
    state           TEXT   NOT NULL DEFAULT 'scheduled',
    run_at          BIGINT NOT NULL,
    payload         BYTEA  NOT NULL,
    idempotency_key TEXT   UNIQUE,
    max_attempts    BIGINT,
    attempts        BIGINT NOT NULL DEFAULT 0,
    last_error      TEXT,
    locked_by       TEXT,
    lock_epoch      BIGINT,
    locked_until    BIGINT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    finished_at     BIGINT
);

CREATE INDEX ttw_tasks_due ON ttw_tasks (state, run_at);
CREATE INDEX ttw_tasks_locked ON ttw_tasks (state, locked_until);
CREATE INDEX ttw_tasks_updated ON ttw_tasks (updated_at);

CREATE TABLE ttw_leases (
    shard         BIGINT PRIMARY KEY,
    owner_node    TEXT,
    owner_session TEXT,
    epoch         BIGINT NOT NULL DEFAULT 0,
    expires_at    BIGINT NOT NULL DEFAULT 0
);

CREATE TABLE ttw_nodes (
    node_id      TEXT PRIMARY KEY,
    session      TEXT   NOT NULL,
    heartbeat_at BIGINT NOT NULL
);
