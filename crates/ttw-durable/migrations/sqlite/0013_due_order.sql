-- A page in due order goes by (due time, id). SQLite's due index already
-- ends with the rowid, the id, so the page reads only its own entries; this
-- migration keeps the version in step with PostgreSQL's, which adds the id
-- to its index.
CREATE INDEX IF NOT EXISTS ttw_tasks_due ON ttw_tasks (state, run_at);

-- The shards each node has taken over from another owner since it joined,
-- so that any node's console shows every node's takeovers.
ALTER TABLE ttw_nodes ADD COLUMN takeovers BIGINT NOT NULL DEFAULT 0;
