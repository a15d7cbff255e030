-- A count of claims that only goes up: outcomes are fenced on it, since
-- attempts start again from 0 when a dead task is redriven.
ALTER TABLE ttw_tasks ADD COLUMN claims BIGINT NOT NULL DEFAULT 0;
