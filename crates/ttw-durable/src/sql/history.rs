//! Finished tasks: the statements that move a task that is done or
//! cancelled out of `ttw_tasks` into `ttw_history`, and back when it is
//! redriven.
//!
//! Retention: a task stays in `ttw_tasks` while it is scheduled, running
//! or dead (a dead task waits there for a redrive). The statement that
//! finishes it as done or cancelled moves it, in one transaction, to
//! `ttw_history`, where it stays for the retention (24 hours unless told)
//! before the sweep deletes it. `get`, `get_by_key`, the listings, the
//! counts, the CLI and the dashboard read `ttw_all_tasks`, a view of both.
//! An idempotency key stays taken while its task is in either table: an
//! insert that takes a key looks in `ttw_history` after its own insert, in
//! the same transaction (see [`finished_twins`]).

/// The columns of `ttw_history`, in the order of [`into_history`].
pub(crate) const HISTORY_COLUMNS: &str =
    "id, state, run_at, payload, idempotency_key, max_attempts, attempts, last_error, \
     created_at, updated_at, finished_at, claims, recurring, queue, priority";

/// What a row of `ttw_tasks` becomes in `ttw_history` ([`HISTORY_COLUMNS`]):
/// `state` (a literal), last changed at `updated` and finished at
/// `finished` (both SQL).
pub(crate) fn into_history(state: &str, updated: &str, finished: &str) -> String {
    format!(
        "id, '{state}', run_at, payload, idempotency_key, max_attempts, attempts, last_error, \
         created_at, {updated}, {finished}, claims, recurring, queue, priority"
    )
}

/// The columns of `ttw_tasks` a redriven task is written back with, in the
/// order of [`from_history`].
pub(crate) const BACK_COLUMNS: &str =
    "id, state, run_at, payload, idempotency_key, max_attempts, attempts, last_error, \
     created_at, updated_at, claims, recurring, queue, priority";

/// What a row of `ttw_history` becomes in `ttw_tasks` when redriven
/// ([`BACK_COLUMNS`]): scheduled at `run_at` with its attempts reset, last
/// changed at `updated` (both SQL).
pub(crate) fn from_history(run_at: &str, updated: &str) -> String {
    format!(
        "id, 'scheduled', {run_at}, payload, idempotency_key, max_attempts, 0, last_error, \
         created_at, {updated}, claims, recurring, queue, priority"
    )
}

/// The statement that finds, among the tasks just inserted (ids bound as
/// `ids`, an SQL condition on `t.id`), those whose idempotency key a
/// finished task in `history` holds: rows of the new task's id and the
/// finished one's (`new_id`, `old_id`).
///
/// Why after the insert: a task leaving `ttw_tasks` for `ttw_history` frees
/// the key in `ttw_tasks`'s unique index as it commits. An insert that
/// looked in `ttw_history` first, in the same statement, could read it
/// before that commit and insert after it, under the same key. Looking in
/// a statement of its own after the insert sees the move: the insert
/// either found the finished task still in `ttw_tasks` (and conflicted),
/// or waited for the move to commit, which this statement then sees. The
/// caller deletes the new tasks it returns, in the same transaction.
pub(crate) fn finished_twins(tasks: &str, history: &str, ids: &str) -> String {
    format!(
        "SELECT t.id AS new_id, h.id AS old_id FROM {tasks} t \
         JOIN {history} h ON h.idempotency_key = t.idempotency_key WHERE {ids}"
    )
}
