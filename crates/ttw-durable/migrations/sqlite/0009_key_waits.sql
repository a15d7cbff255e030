-- The partition keys whose due tasks a node holds back because its queue is
-- at its concurrency: the limited claims of every node read them, so that a
-- place freed on one node goes to a key waiting on another in its turn,
-- rather than to the key whose backlog that node holds. Tasks without a key
-- are the key ''. A row is written by the limited claim of the node that
-- waits (under the queue's row lock) and forgotten at `wait_until` (ms), so a
-- node that stopped asking holds no place for long.
CREATE TABLE ttw_key_waits (
    queue         TEXT   NOT NULL,
    partition_key TEXT   NOT NULL,
    session       TEXT   NOT NULL,
    wait_until    INTEGER NOT NULL,
    PRIMARY KEY (queue, partition_key, session)
);
