-- Queues: every task belongs to a named queue ('default' unless told), and
-- of the tasks of one queue due together, a node short of room in the queue
-- claims the lowest priority number first. Schedules name the queue and
-- priority of the tasks they make.
ALTER TABLE ttw_tasks ADD COLUMN queue TEXT NOT NULL DEFAULT 'default';
ALTER TABLE ttw_tasks ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
CREATE INDEX ttw_tasks_queue ON ttw_tasks (queue, state);
ALTER TABLE ttw_recurring ADD COLUMN queue TEXT NOT NULL DEFAULT 'default';
ALTER TABLE ttw_recurring ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
-- The queues a node serves, comma-separated: each queue's shards are shared
-- among the nodes that serve it.
ALTER TABLE ttw_nodes ADD COLUMN queues TEXT NOT NULL DEFAULT 'default';
-- A lease per queue and shard, so that a node serves only the queues it has
-- handlers for, and a queue no node serves waits. The leases held so far
-- were all of the default queue, and keep their owners and epochs.
CREATE TABLE ttw_leases_by_queue (
    queue         TEXT    NOT NULL,
    shard         INTEGER NOT NULL,
    owner_node    TEXT,
    owner_session TEXT,
    epoch         INTEGER NOT NULL DEFAULT 0,
    expires_at    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, shard)
);
INSERT INTO ttw_leases_by_queue (queue, shard, owner_node, owner_session, epoch, expires_at)
    SELECT 'default', shard, owner_node, owner_session, epoch, expires_at FROM ttw_leases;
DROP TABLE ttw_leases;
ALTER TABLE ttw_leases_by_queue RENAME TO ttw_leases;
CREATE INDEX ttw_leases_owner ON ttw_leases (owner_session);
