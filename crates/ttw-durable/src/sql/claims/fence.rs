//! The fragments of SQL every claim and outcome statement shares, each
//! written once: the lane a task is in and whether this session holds its
//! lease, the fence an outcome must pass, "out of attempts", the
//! assignments of a retry or a death, and the flow-control guard.

/// The lease of the task's lane: its queue and its shard (`shards` is the
/// shard count, SQL).
pub(super) fn task_lane(shards: &str) -> String {
    format!("l.queue = ttw_tasks.queue AND l.shard = ttw_tasks.id % {shards}")
}

/// The task's lane is one whose lease `session` holds (`shards` is the
/// shard count). Both are SQL: placeholders or column names.
///
/// A scalar subquery on the lease's primary key (a lane has one lease
/// row), not `EXISTS`: PostgreSQL flattens an `EXISTS` into a join and,
/// with statistics from before the node took its leases (a few rows
/// owned, where it owns all 256), drove the claim from the leases, scanning
/// every scheduled task of the queue once per lease: a claim of a few ids
/// among 20,000 due took up to a second. A scalar subquery stays a
/// per-row check, so the statement's own conditions (the ids) pick the
/// rows.
pub(super) fn in_held_shard(session: &str, shards: &str) -> String {
    format!(
        "(SELECT l.owner_session FROM ttw_leases l WHERE {}) = {session}",
        task_lane(shards)
    )
}

/// The epoch of the lease `session` holds on the task's lane (NULL when it
/// holds none), as a per-row check (see [`in_held_shard`]).
pub(super) fn held_epoch(session: &str, shards: &str) -> String {
    format!(
        "(SELECT l.epoch FROM ttw_leases l WHERE {} AND l.owner_session = {session})",
        task_lane(shards)
    )
}

/// `condition` as a check on rows found by their key, never a way to find
/// them: `IS TRUE` keeps the planner from reading it through an index.
///
/// The statements that take tasks by id (claims, outcomes) also say what
/// state the task must be in. PostgreSQL, with statistics from before a
/// burst (a few rows running, where thousands are), read such a statement
/// through the `(state, ...)` index, every `running` entry of it, and
/// joined the ids to what it found: a batch of 500 successes took 50 to
/// 180 ms, and a held snapshot, which keeps every entry that index ever
/// had, makes it worse. Written this way, the ids are the only way in.
pub(super) fn checked(condition: &str) -> String {
    format!("({condition}) IS TRUE")
}

/// The fence on an outcome (without the id): the task is still running
/// under the claim that counted `claim`, by `session`, which still holds
/// the shard's lease at the epoch the claim stamped. (The claim count,
/// unlike the attempt number, never starts again, so an outcome from
/// before a redrive is refused.) Every column named by `ttw_tasks.`, for
/// statements that join.
pub(super) fn fence(claim: &str, session: &str, shards: &str) -> String {
    checked(&format!(
        "ttw_tasks.claims = {claim} AND {}",
        still_held(session, shards)
    ))
}

/// The part of the fence that does not name the claim: running, locked
/// by `session`, under the lease epoch it still holds.
pub(super) fn still_held(session: &str, shards: &str) -> String {
    format!(
        "ttw_tasks.state = 'running' AND ttw_tasks.locked_by = {session} \
         AND {} = ttw_tasks.lock_epoch",
        held_epoch(session, shards)
    )
}

/// The fence on the outcome of one attempt: task `id` (see [`fence`]).
pub(super) fn fenced(id: &str, claim: &str, session: &str, shards: &str) -> String {
    format!("id = {id} AND {}", fence(claim, session, shards))
}

/// The task has used every attempt it may: its own limit, else its
/// queue's (`ttw_queues`), else `default_max`, the node's.
pub(super) fn out_of_attempts(default_max: &str) -> String {
    format!(
        "attempts >= COALESCE(max_attempts, \
         (SELECT q.max_attempts FROM ttw_queues q WHERE q.queue = ttw_tasks.queue), {default_max})"
    )
}

/// The assignments that end an attempt without success: scheduled again at
/// `retry_at`, or dead (finished at `now`) when out of attempts or when
/// `dead_now` (an expression) is 1.
pub(super) fn retry_or_dead(
    default_max: &str,
    retry_at: &str,
    now: &str,
    dead_now: &str,
) -> String {
    let out = format!("({} OR {dead_now} = 1)", out_of_attempts(default_max));
    format!(
        "state = CASE WHEN {out} THEN 'dead' ELSE 'scheduled' END, \
         run_at = CASE WHEN {out} THEN run_at ELSE {retry_at} END, \
         finished_at = CASE WHEN {out} THEN {now} ELSE NULL END"
    )
}

/// The assignments that take a task's lock off.
pub(super) const UNLOCK: &str = "locked_by = NULL, locked_until = NULL";

/// The task's queue has no flow control: no row in `ttw_queues`, or one
/// that neither pauses nor limits it. The controlled queues are read once
/// per statement (an uncorrelated `NOT IN`, hashed by PostgreSQL and kept
/// as a temporary index by SQLite), then each candidate row is checked
/// against them: a filter, never a way to find rows, and nearly free while
/// the table is empty.
pub(super) fn uncontrolled() -> String {
    format!("ttw_tasks.queue NOT IN (SELECT q.queue FROM ttw_queues q WHERE {CONTROLLED})")
}

/// A settings row `q` pauses or limits its queue.
pub(super) const CONTROLLED: &str =
    "q.paused <> 0 OR q.concurrency IS NOT NULL OR q.rate_count IS NOT NULL \
                          OR q.key_concurrency IS NOT NULL";
