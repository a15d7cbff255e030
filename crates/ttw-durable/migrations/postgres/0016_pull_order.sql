-- A pull queue's claim takes the due tasks of one queue by (priority, due
-- time, id): the queue index goes on in that order, so that a claim reads
-- each priority's due entries from their start and stops at its page, not
-- every due task of the queue to sort them (50,000 due made each claim sort
-- them all). Counts by queue and state read the same index's prefix.
DROP INDEX ttw_tasks_queue;
CREATE INDEX ttw_tasks_queue ON ttw_tasks (queue, state, priority, run_at, id);
