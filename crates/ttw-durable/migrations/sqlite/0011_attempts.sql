-- The history of every attempt (`Store::attempts`). A failed attempt and
-- one a crash cut short are rows of `ttw_attempts`, written in the
-- transaction that records the outcome; the attempt that succeeded stays on
-- the task's row of `ttw_history`, written by the statement that moves it
-- there, so that the fast path writes no row more. `started_at` is when the
-- current attempt was claimed (the node's clock), kept on the task.
ALTER TABLE ttw_tasks ADD COLUMN started_at BIGINT;
ALTER TABLE ttw_history ADD COLUMN started_at BIGINT;
ALTER TABLE ttw_history ADD COLUMN locked_by TEXT;
ALTER TABLE ttw_history ADD COLUMN answer_status INTEGER;
ALTER TABLE ttw_history ADD COLUMN answer TEXT;

-- One row per attempt that did not succeed, keyed by the task's claim
-- count (it never starts again, where the attempt number does on a
-- redrive). Deleted with the task's history by the retention sweep.
CREATE TABLE ttw_attempts (
    task_id    BIGINT NOT NULL,
    claim      BIGINT NOT NULL,
    attempt    BIGINT NOT NULL,
    locked_by  TEXT,
    started_at BIGINT,
    ended_at   BIGINT NOT NULL,
    outcome    TEXT NOT NULL,
    status     INTEGER,
    detail     TEXT,
    PRIMARY KEY (task_id, claim)
);
