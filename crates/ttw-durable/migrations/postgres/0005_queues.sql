-- Queues: every task belongs to a named queue ('default' unless told), and
-- of the tasks of one queue due together, a node short of room in the queue
-- claims the lowest priority number first. Schedules name the queue and
-- priority of the tasks they make.
ALTER TABLE ttw_tasks ADD COLUMN queue TEXT NOT NULL DEFAULT 'default';
ALTER TABLE ttw_tasks ADD COLUMN priority BIGINT NOT NULL DEFAULT 0;
CREATE INDEX ttw_tasks_queue ON ttw_tasks (queue, state);
ALTER TABLE ttw_recurring ADD COLUMN queue TEXT NOT NULL DEFAULT 'default';
ALTER TABLE ttw_recurring ADD COLUMN priority BIGINT NOT NULL DEFAULT 0;
-- The queues a node serves, comma-separated: each queue's shards are shared
-- among the nodes that serve it.
ALTER TABLE ttw_nodes ADD COLUMN queues TEXT NOT NULL DEFAULT 'default';
-- A lease per queue and shard, so that a node serves only the queues it has
-- handlers for, and a queue no node serves waits. The leases held so far
-- were all of the default queue, and keep their owners and epochs.
ALTER TABLE ttw_leases ADD COLUMN queue TEXT NOT NULL DEFAULT 'default';
ALTER TABLE ttw_leases DROP CONSTRAINT ttw_leases_pkey;
ALTER TABLE ttw_leases ADD PRIMARY KEY (queue, shard);
CREATE INDEX ttw_leases_owner ON ttw_leases (owner_session);
