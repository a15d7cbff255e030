-- Recurring schedules: one row per named schedule (a cron expression in a
-- time zone, or a fixed interval). `next_at` is its next occurrence not yet
-- made a task; the node that holds the lease of `shard` makes occurrences
-- tasks, keyed by the schedule's name and the occurrence's time, so each
-- becomes one task however many nodes try. `version` goes up with every
-- change by an operator (update, pause, resume), so a node that read the
-- row before the change writes nothing.
CREATE TABLE ttw_recurring (
    name            TEXT    PRIMARY KEY,
    shard           BIGINT  NOT NULL,
    cron            TEXT,
    time_zone       TEXT,
    every_ms        BIGINT,
    catch_up        TEXT    NOT NULL,
    missed_after_ms BIGINT  NOT NULL,
    payload         BYTEA   NOT NULL,
    max_attempts    BIGINT,
    paused          BIGINT  NOT NULL DEFAULT 0,
    next_at         BIGINT  NOT NULL,
    version         BIGINT  NOT NULL DEFAULT 0,
    created_at      BIGINT  NOT NULL,
    updated_at      BIGINT  NOT NULL
);

-- The schedule an occurrence task came from, so that pausing, changing or
-- deleting a schedule finds the occurrences not yet started.
ALTER TABLE ttw_tasks ADD COLUMN recurring TEXT;
CREATE INDEX ttw_tasks_recurring ON ttw_tasks (recurring, state) WHERE recurring IS NOT NULL;
