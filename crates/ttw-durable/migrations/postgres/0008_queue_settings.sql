-- Queue settings every node obeys, changed live by an operator: paused or
-- not, at most `concurrency` tasks running at once across all nodes, and at
-- most `rate_count` starts every `rate_period` ms with bursts of up to
-- `rate_burst` (a token bucket: `tokens` as of `refilled_at`, by the
-- database's clock); at most `key_concurrency` running at once for each
-- partition key (a tenant, a customer), the keys served in turn; and the
-- retry policy (`max_attempts`, a backoff from `backoff_base` doubling up
-- to `backoff_max`, in ms) over each node's own. A queue
-- without a row, or with none of them set, is claimed as before, in one
-- statement.
CREATE TABLE ttw_queues (
    queue       TEXT    PRIMARY KEY,
    paused      BIGINT NOT NULL DEFAULT 0,
    concurrency BIGINT,
    rate_count  BIGINT,
    rate_period BIGINT,
    rate_burst  BIGINT,
    key_concurrency BIGINT,
    max_attempts BIGINT,
    backoff_base BIGINT,
    backoff_max BIGINT,
    tokens      DOUBLE PRECISION NOT NULL DEFAULT 0,
    refilled_at BIGINT NOT NULL DEFAULT 0,
    updated_at  BIGINT NOT NULL
);
-- A task's partition key: its tasks take turns with other keys' on a node,
-- and a queue's key_concurrency caps each key's running tasks.
ALTER TABLE ttw_tasks ADD COLUMN partition_key TEXT;
-- Kept through the history, so that a task redriven from there keeps it.
ALTER TABLE ttw_history ADD COLUMN partition_key TEXT;
