-- Finished tasks leave the hot table. A task that is done or cancelled
-- moves, in the statement that finishes it, from ttw_tasks to ttw_history,
-- where it stays for the retention and is then swept. So what claims and
-- outcomes read (ttw_tasks and its indexes) holds what is pending, running
-- or dead, not every task that ran in the last day. Dead tasks stay in
-- ttw_tasks, waiting for a redrive. An idempotency key stays taken while
-- its task is in either table; ttw_all_tasks shows both.
CREATE TABLE ttw_history (
    id              INTEGER PRIMARY KEY,
    state           TEXT    NOT NULL,
    run_at          INTEGER NOT NULL,
    payload         BLOB   NOT NULL,
    idempotency_key TEXT,
    max_attempts    INTEGER,
    attempts        INTEGER NOT NULL,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    finished_at     INTEGER NOT NULL,
    claims          INTEGER NOT NULL,
    recurring       TEXT,
    queue           TEXT    NOT NULL,
    priority        INTEGER NOT NULL
);
CREATE INDEX ttw_history_finished ON ttw_history (finished_at);
CREATE INDEX ttw_history_key ON ttw_history (idempotency_key) WHERE idempotency_key IS NOT NULL;

INSERT INTO ttw_history (id, state, run_at, payload, idempotency_key, max_attempts, attempts, last_error,
                         created_at, updated_at, finished_at, claims, recurring, queue, priority)
SELECT id, state, run_at, payload, idempotency_key, max_attempts, attempts, last_error,
       created_at, updated_at, COALESCE(finished_at, updated_at), claims, recurring, queue, priority
FROM ttw_tasks WHERE state IN ('done', 'cancelled');
DELETE FROM ttw_tasks WHERE state IN ('done', 'cancelled');

CREATE VIEW ttw_all_tasks AS
SELECT id, state, run_at, payload, idempotency_key, max_attempts, attempts, last_error,
       locked_by, lock_epoch, locked_until, created_at, updated_at, finished_at,
       claims, recurring, queue, priority
FROM ttw_tasks
UNION ALL
SELECT id, state, run_at, payload, idempotency_key, max_attempts, attempts, last_error,
       CAST(NULL AS TEXT), CAST(NULL AS INTEGER), CAST(NULL AS INTEGER), created_at, updated_at, finished_at,
       claims, recurring, queue, priority
FROM ttw_history;
