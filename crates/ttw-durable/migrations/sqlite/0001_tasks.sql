-- Durable delayed tasks, SQLite form. Times are milliseconds since the Unix epoch.
CREATE TABLE ttw_meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);

CREATE TABLE ttw_tasks (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    state           TEXT    NOT NULL DEFAULT 'scheduled',
    run_at          INTEGER NOT NULL,
    payload         BLOB    NOT NULL,
    idempotency_key TEXT    UNIQUE,
    max_attempts    INTEGER,
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    locked_by       TEXT,
    lock_epoch      INTEGER,
    locked_until    INTEGER,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    finished_at     INTEGER
);

CREATE INDEX ttw_tasks_due ON ttw_tasks (state, run_at);
CREATE INDEX ttw_tasks_locked ON ttw_tasks (state, locked_until);
CREATE INDEX ttw_tasks_updated ON ttw_tasks (updated_at);

CREATE TABLE ttw_leases (
    shard         INTEGER PRIMARY KEY,
    owner_node    TEXT,
    owner_session TEXT,
    epoch         INTEGER NOT NULL DEFAULT 0,
    expires_at    INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE ttw_nodes (
    node_id      TEXT PRIMARY KEY,
    session      TEXT    NOT NULL,
    heartbeat_at INTEGER NOT NULL
);
