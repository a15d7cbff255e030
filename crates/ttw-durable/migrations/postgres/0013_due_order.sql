-- A page in due order goes by (due time, id), and its cursor is both: the
-- due index ends with the id, so that a page among many tasks due at the
-- same millisecond (a burst of a million at 10:00) reads its own entries,
-- not every task of that millisecond to sort them. The claims' reads of the
-- index are unchanged by the extra column.
DROP INDEX ttw_tasks_due;
CREATE INDEX ttw_tasks_due ON ttw_tasks (state, run_at, id);

-- The shards each node has taken over from another owner since it joined,
-- so that any node's console shows every node's takeovers.
ALTER TABLE ttw_nodes ADD COLUMN takeovers BIGINT NOT NULL DEFAULT 0;
