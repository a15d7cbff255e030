-- A lease is held while its owner's session heartbeats: one row per node is
-- written per heartbeat, not one per shard. `process` names the operating
-- system process behind a session (on Linux), so a node on the same machine
-- can tell that the process is gone without waiting out the TTL; `leaving`
-- marks a node that is shutting down: still holding what it has not given
-- back, no longer counted when shares are worked out.
ALTER TABLE ttw_nodes ADD COLUMN process TEXT;
ALTER TABLE ttw_nodes ADD COLUMN leaving INTEGER NOT NULL DEFAULT 0;
