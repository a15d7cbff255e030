-- The workers that claim from pull queues: a claim records its worker's
-- name and when (at most once a second per process), so that an operator sees
-- who polls each queue and when it was last seen. One row a (queue,
-- worker); the read leaves out (and deletes) those not seen for a day.
CREATE TABLE ttw_workers (
    queue TEXT NOT NULL,
    worker TEXT NOT NULL,
    last_seen BIGINT NOT NULL,
    PRIMARY KEY (queue, worker)
);
