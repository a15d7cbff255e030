-- Queue settings every node obeys, changed live by an operator: paused or
-- not, at most `concurrency` tasks running at once across all nodes, and at
-- most `rate_count` starts every `rate_period` ms with bursts of up to
-- `rate_burst` (a token bucket: `tokens` as of `refilled_at`, by the
-- database's clock). A queue without a row, or with none of them set, is
-- claimed as before, in one statement.
CREATE TABLE ttw_queues (
    queue       TEXT    PRIMARY KEY,
    paused      INTEGER NOT NULL DEFAULT 0,
    concurrency INTEGER,
    rate_count  INTEGER,
    rate_period INTEGER,
    rate_burst  INTEGER,
    tokens      REAL    NOT NULL DEFAULT 0,
    refilled_at INTEGER NOT NULL DEFAULT 0,
    updated_at  INTEGER NOT NULL
);
