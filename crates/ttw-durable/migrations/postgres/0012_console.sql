-- The console's filter by partition key, a keyset page on an index: tasks
-- without a key (most of them, in most stores) are not in it, so that a
-- write of one costs nothing more.
CREATE INDEX ttw_tasks_partition ON ttw_tasks (partition_key, id) WHERE partition_key IS NOT NULL;
CREATE INDEX ttw_history_partition ON ttw_history (partition_key, id) WHERE partition_key IS NOT NULL;
