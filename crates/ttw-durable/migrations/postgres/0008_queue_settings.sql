-- Queue settings every node obeys, changed live by an operator: paused or
-- not, at most `concurrency` tasks running at once across all nodes, and at
-- most `rate_count` starts every `rate_period` ms with bursts of up to
-- `rate_burst` (a token bucket: `tokens` as of `refilled_at`, by the
-- database's clock). A queue without a row, or with none of them set, is
-- claimed as before, in one statement.
CREATE TABLE ttw_queues (
    queue       TEXT    PRIMARY KEY,
    paused      BIGINT NOT NULL DEFAULT 0,
    concurrency BIGINT,
    rate_count  BIGINT,
    rate_period BIGINT,
    rate_burst  BIGINT,
    tokens      DOUBLE PRECISION NOT NULL DEFAULT 0,
    refilled_at BIGINT NOT NULL DEFAULT 0,
    updated_at  BIGINT NOT NULL
);
