-- A task's kind: the name of a typed job's arguments (`JobArgs::KIND`), its
-- payload their JSON. NULL for an untyped task (every task written before
-- this migration): bytes and a queue, as before. Kept through the history,
-- so that a redrive keeps it. The filter by kind is a keyset page on an
-- index that holds only typed tasks, so that an untyped write costs nothing
-- more.
ALTER TABLE ttw_tasks ADD COLUMN kind TEXT;
ALTER TABLE ttw_history ADD COLUMN kind TEXT;
CREATE INDEX ttw_tasks_kind ON ttw_tasks (kind, id) WHERE kind IS NOT NULL;
CREATE INDEX ttw_history_kind ON ttw_history (kind, id) WHERE kind IS NOT NULL;

-- A recurring schedule's occurrences are typed jobs of this kind, if it
-- names one.
ALTER TABLE ttw_recurring ADD COLUMN kind TEXT;

DROP VIEW ttw_all_tasks;
CREATE VIEW ttw_all_tasks AS
SELECT id, state, run_at, payload, idempotency_key, max_attempts, attempts, last_error,
       locked_by, lock_epoch, locked_until, created_at, updated_at, finished_at,
       claims, recurring, queue, priority, partition_key, envelope, kind
FROM ttw_tasks
UNION ALL
SELECT id, state, run_at, payload, idempotency_key, max_attempts, attempts, last_error,
       CAST(NULL AS TEXT), CAST(NULL AS BIGINT), CAST(NULL AS BIGINT), created_at, updated_at, finished_at,
       claims, recurring, queue, priority, partition_key, envelope, kind
FROM ttw_history;
