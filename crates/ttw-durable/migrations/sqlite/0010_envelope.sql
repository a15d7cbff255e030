-- What a task carries for its delivery beside its payload (`Envelope`): a
-- destination of its own, the trace context of the request that scheduled
-- it, the URLs told of its outcome. JSON text; NULL for most tasks, which
-- have none. Kept through the history, so that a redrive keeps it.
ALTER TABLE ttw_tasks ADD COLUMN envelope TEXT;
ALTER TABLE ttw_history ADD COLUMN envelope TEXT;

DROP VIEW ttw_all_tasks;
CREATE VIEW ttw_all_tasks AS
SELECT id, state, run_at, payload, idempotency_key, max_attempts, attempts, last_error,
       locked_by, lock_epoch, locked_until, created_at, updated_at, finished_at,
       claims, recurring, queue, priority, partition_key, envelope
FROM ttw_tasks
UNION ALL
SELECT id, state, run_at, payload, idempotency_key, max_attempts, attempts, last_error,
       CAST(NULL AS TEXT), CAST(NULL AS BIGINT), CAST(NULL AS BIGINT), created_at, updated_at, finished_at,
       claims, recurring, queue, priority, partition_key, envelope
FROM ttw_history;
