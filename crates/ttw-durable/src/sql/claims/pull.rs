//! The statements of a pull queue: the claim of due tasks for a worker,
//! under a lease, and the settling of a claim (ack, nack, extend), each
//! fenced on the claim.
//!
//! A task a worker holds is `running` with `lock_epoch` [`WORKER`] (no
//! node's lease epoch is negative), `locked_by` the worker's name and
//! `locked_until` its lease. A node's outcome cannot pass its fence (not
//! its session, not its epoch); the reclaim takes it back only once its
//! lease has run out, never because the node that handed it out died
//! (`reclaim.rs`), and records that attempt as `expired`.

use super::*;
use crate::model::backoff::Backoff;
use crate::sql::announce::{AnnouncedRow, ANNOUNCED};
use crate::sql::names::Names;

/// The `lock_epoch` of a task a worker holds under a lease.
pub(crate) const WORKER: i64 = -1;

/// A claim's parameters: up to `max` due tasks of `queue` (of `kinds`, if
/// any are named), leased to `worker` until `lease_until`, at `now`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pulling<'a> {
    pub(crate) queue: &'a str,
    pub(crate) max: i64,
    pub(crate) now: i64,
    pub(crate) lease_until: i64,
    pub(crate) worker: &'a str,
    pub(crate) kinds: &'a [String],
}

/// A task a claim handed out, as the statement returned it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct PulledRow {
    pub(crate) id: i64,
    pub(crate) run_at: i64,
    pub(crate) attempts: i64,
    pub(crate) claims: i64,
    pub(crate) priority: i64,
    pub(crate) payload: Vec<u8>,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) envelope: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) partition_key: Option<String>,
}

/// What a claim took, and when to look again if the queue's flow control
/// held it back.
#[derive(Debug, Default)]
pub(crate) struct Pulled {
    pub(crate) rows: Vec<PulledRow>,
    /// Set when the queue's pause, concurrency, per-key concurrency or
    /// rate may have left due tasks behind: look again in this many ms
    /// (the next token of its rate, else [`HELD_BACK_LOOK_MS`]), since
    /// room can free on another instance without a wake here.
    pub(crate) again_in: Option<i64>,
}

/// How many priorities a claim reads one at a time before it takes the
/// rest of its page in one sorted statement.
pub(crate) const PRIORITY_LEVELS: usize = 8;

/// How soon a claim held back by a queue's pause, concurrency or per-key
/// concurrency looks again while it waits.
pub(crate) const HELD_BACK_LOOK_MS: i64 = 250;

/// The held task a settle found under its fence.
#[derive(Debug, sqlx::FromRow)]
struct HeldRow {
    queue: String,
    attempts: i64,
    locked_by: Option<String>,
    started_at: Option<i64>,
}

/// What a settle did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Settled<T> {
    /// Done; what it answers.
    Yes(T),
    /// The claim is not the task's current one, or its lease ran out.
    Stale,
    /// The task is in a queue the caller may not use.
    NotAllowed(String),
}

/// The fence of a settle: task `$1` held under claim `$2` by a worker
/// whose lease has not run out at `$3`. The id stays outside the check: it
/// is the way in (inside, each settle read every task of the table: 266
/// acks a second with 50,000 held).
fn held() -> String {
    format!(
        "id = $1 AND {}",
        checked(&format!(
            "claims = $2 AND state = 'running' AND lock_epoch = {WORKER} \
             AND locked_until >= $3"
        ))
    )
}

/// The read of a held task, by `find_held!`.
pub(crate) fn find_held_sql(db: &Db) -> String {
    format!(
        "SELECT queue, attempts, locked_by, started_at FROM ttw_tasks WHERE {}{}",
        held(),
        if db.is_sqlite() { "" } else { " FOR UPDATE" }
    )
}

/// The task `$id` held under `$claim` at `$now` (see [`held`]), read (and
/// on PostgreSQL locked) in transaction `$tx` of `$db`.
macro_rules! find_held {
    ($tx:expr, $db:expr, $id:expr, $claim:expr, $now:expr) => {{
        let sql = find_held_sql($db);
        let row: Option<HeldRow> = sqlx::query_as(&sql)
            .bind($id)
            .bind($claim)
            .bind($now)
            .fetch_optional(&mut *$tx)
            .await?;
        row
    }};
}

/// Claims up to `pull.max` due tasks of `pull.queue` for `pull.worker`, in
/// one transaction, under the queue's flow control: nothing while it is
/// paused; no more than its concurrency counting every task of the queue
/// running now (held by a worker or a node, lease or lock not run out);
/// no more than its per-key concurrency of one partition key; no more than
/// the whole tokens of its rate's bucket, which pays one per task taken,
/// the same bucket the nodes' limited claims pay from. On PostgreSQL the
/// queue's settings row is locked first (by the bucket's refill), so that
/// the limited claims of every node and instance go one at a time, and the
/// tasks are taken with `SKIP LOCKED`; on SQLite the one writer does both.
pub(crate) async fn claim(db: &Db, pull: Pulling<'_>) -> Result<Pulled, Error> {
    let postgres = !db.is_sqlite();
    let refill = super::limited::refill_sql(db);
    let running_sql = "SELECT COUNT(*) FROM ttw_tasks WHERE queue = $1 AND state = 'running' \
                       AND locked_until >= $2";
    let kinds = if pull.kinds.is_empty() {
        String::new()
    } else {
        format!(" AND kind IN ({})", placeholders(7, pull.kinds.len()))
    };
    let due = format!("queue = $1 AND state = 'scheduled' AND run_at <= $2{kinds}");
    let order = "ORDER BY priority, run_at, id";
    let turn = db.write_turn(Urgency::Urgent).await;
    let pulled: Pulled = with_pool!(db, pool => {
        let mut tx = pool.begin().await?;
        let control: Option<super::limited::Bucket> = sqlx::query_as(&refill)
            .bind(pull.queue)
            .fetch_optional(&mut *tx)
            .await?;
        let mut room = pull.max;
        let mut key_cap = None;
        let mut again_in = None;
        let mut rated = false;
        if let Some(control) = &control {
            if control.paused != 0 {
                room = 0;
                again_in = Some(HELD_BACK_LOOK_MS);
            }
            if let Some(limit) = control.concurrency {
                let running: i64 = sqlx::query_scalar(running_sql)
                    .bind(pull.queue)
                    .bind(pull.now)
                    .fetch_one(&mut *tx)
                    .await?;
                if limit - running < room {
                    room = limit - running;
                    again_in = Some(HELD_BACK_LOOK_MS);
                }
            }
            if let Some((whole, next)) = control.rate_room(usize::try_from(room.max(0)).unwrap_or(0)) {
                rated = true;
                if let Some(after) = next {
                    room = room.min(i64::try_from(whole).unwrap_or(i64::MAX));
                    again_in = Some(again_in.map_or(after, |a: i64| a.min(after)));
                }
            }
            key_cap = control.key_concurrency;
            if key_cap.is_some() {
                again_in = again_in.or(Some(HELD_BACK_LOOK_MS));
            }
        }
        if room <= 0 {
            tx.rollback().await?;
            Pulled { rows: Vec::new(), again_in }
        } else {
            let set = format!(
                "SET state = 'running', attempts = attempts + 1, \
                 claims = claims + 1, locked_by = $4, lock_epoch = {WORKER}, locked_until = $5, \
                 started_at = $2, updated_at = {}",
                db.clock_sql()
            );
            let returning = "RETURNING ttw_tasks.id, run_at, attempts, claims, priority, payload, \
                             idempotency_key, envelope, kind, partition_key";
            let rows = match key_cap {
                // Under the settings row's lock (or SQLite's one writer):
                // each key's due tasks numbered in due order, and taken
                // while its running ones and those before stay under its
                // cap.
                Some(cap) => {
                    let candidates = format!(
                        "SELECT c.id FROM (SELECT id, priority, run_at, partition_key, \
                         ROW_NUMBER() OVER (PARTITION BY partition_key {order}) AS nth \
                         FROM ttw_tasks WHERE {due}) AS c \
                         WHERE c.partition_key IS NULL OR c.nth + (SELECT COUNT(*) FROM ttw_tasks r \
                         WHERE r.queue = $1 AND r.partition_key = c.partition_key \
                         AND r.state = 'running' AND r.locked_until >= $2) <= $6 \
                         ORDER BY c.priority, c.run_at, c.id LIMIT $3"
                    );
                    let sql = format!(
                        "UPDATE ttw_tasks {set} WHERE id IN ({candidates}) AND state = 'scheduled' \
                         {returning}"
                    );
                    let mut query = sqlx::query_as::<_, PulledRow>(&sql)
                        .bind(pull.queue)
                        .bind(pull.now)
                        .bind(room)
                        .bind(pull.worker)
                        .bind(pull.lease_until)
                        .bind(cap);
                    for kind in pull.kinds {
                        query = query.bind(kind);
                    }
                    query.fetch_all(&mut *tx).await?
                }
                // One priority at a time, lowest first, each read from the
                // start of its due entries in the queue index (queue, state,
                // priority, run_at, id) up to what is left of the page: the
                // claim reads what it takes (and one index descent for each
                // priority it looks at), not every due task of the queue.
                // On PostgreSQL a row another claim has locked is skipped.
                None => {
                    let kinds = if pull.kinds.is_empty() {
                        String::new()
                    } else {
                        format!(" AND kind IN ({})", placeholders(5, pull.kinds.len()))
                    };
                    let level = format!(
                        "SELECT id FROM ttw_tasks WHERE queue = $1 AND state = 'scheduled' \
                         AND priority = $4 AND run_at <= $2{kinds} ORDER BY run_at, id LIMIT $3{}",
                        if postgres { " FOR UPDATE SKIP LOCKED" } else { "" }
                    );
                    // Past a few priorities, the rest in one statement
                    // (sorted, as before the index): a queue of many
                    // priorities, most with nothing due, costs a claim a
                    // bounded number of round trips.
                    let rest = format!(
                        "SELECT id FROM ttw_tasks WHERE queue = $1 AND state = 'scheduled' \
                         AND priority > $4 AND run_at <= $2{kinds} \
                         ORDER BY priority, run_at, id LIMIT $3{}",
                        if postgres { " FOR UPDATE SKIP LOCKED" } else { "" }
                    );
                    let mut ids: Vec<i64> = Vec::new();
                    let mut after: Option<i64> = None;
                    let mut levels = 0;
                    while (ids.len() as i64) < room {
                        // At `$4`: the next priority, or past the last
                        // one read, the rest of the page.
                        let (statement, priority) = match after {
                            Some(after) if levels == PRIORITY_LEVELS => (&rest, after),
                            _ => {
                                // Two statements, not `$2 IS NULL OR ...`:
                                // a plan kept for that would not start at
                                // `$2`.
                                let next: Option<i64> = match after {
                                    None => sqlx::query_scalar(
                                        "SELECT MIN(priority) FROM ttw_tasks WHERE queue = $1 \
                                         AND state = 'scheduled'",
                                    )
                                    .bind(pull.queue)
                                    .fetch_one(&mut *tx)
                                    .await?,
                                    Some(after) => sqlx::query_scalar(
                                        "SELECT MIN(priority) FROM ttw_tasks WHERE queue = $1 \
                                         AND state = 'scheduled' AND priority > $2",
                                    )
                                    .bind(pull.queue)
                                    .bind(after)
                                    .fetch_one(&mut *tx)
                                    .await?,
                                };
                                let Some(priority) = next else { break };
                                (&level, priority)
                            }
                        };
                        let mut query = sqlx::query_scalar::<_, i64>(statement)
                            .bind(pull.queue)
                            .bind(pull.now)
                            .bind(room - ids.len() as i64)
                            .bind(priority);
                        for kind in pull.kinds {
                            query = query.bind(kind);
                        }
                        ids.extend(query.fetch_all(&mut *tx).await?);
                        if levels == PRIORITY_LEVELS {
                            break;
                        }
                        levels += 1;
                        after = Some(priority);
                    }
                    if ids.is_empty() {
                        Vec::new()
                    } else {
                        let sql = format!(
                            "UPDATE ttw_tasks {set} WHERE id IN ({}) AND queue = $1 \
                             AND state = 'scheduled' AND $3 >= 0 {returning}",
                            placeholders(6, ids.len())
                        );
                        // `$3` (the page) is named, unused, so that the
                        // parameters keep their places in both statements.
                        let mut query = sqlx::query_as::<_, PulledRow>(&sql)
                            .bind(pull.queue)
                            .bind(pull.now)
                            .bind(room)
                            .bind(pull.worker)
                            .bind(pull.lease_until);
                        for id in &ids {
                            query = query.bind(*id);
                        }
                        query.fetch_all(&mut *tx).await?
                    }
                }
            };
            if rated && !rows.is_empty() {
                sqlx::query(super::limited::PAY)
                    .bind(pull.queue)
                    .bind(rows.len() as f64)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            // A full page was taken: whatever is left is for the next claim.
            let again_in = if rows.len() as i64 == pull.max { None } else { again_in };
            Pulled { rows, again_in }
        }
    });
    drop(turn);
    let mut pulled = pulled;
    pulled
        .rows
        .sort_unstable_by_key(|r| (r.priority, r.run_at, r.id));
    Ok(pulled)
}

/// A worker of a pull queue, as [`workers`] reads it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct WorkerRow {
    pub(crate) queue: String,
    pub(crate) worker: String,
    pub(crate) last_seen: i64,
    /// The tasks it holds now (leases not run out).
    pub(crate) held: i64,
}

/// Records that `worker` claimed from `queue` at `now`, in a statement of
/// its own (not in the claim's transaction: many claims under one name
/// would wait on its row).
pub(crate) async fn seen(db: &Db, queue: &str, worker: &str, now: i64) -> Result<(), Error> {
    let sql = "INSERT INTO ttw_workers (queue, worker, last_seen) VALUES ($1, $2, $3) \
               ON CONFLICT (queue, worker) DO UPDATE SET last_seen = excluded.last_seen";
    let turn = db.write_turn(Urgency::Ordinary).await;
    with_pool!(db, pool => {
        sqlx::query(sql)
            .bind(queue)
            .bind(worker)
            .bind(now)
            .execute(pool)
            .await?;
    });
    drop(turn);
    Ok(())
}

/// How long a worker not seen stays in [`workers`]: a day.
pub(crate) const WORKER_FORGOTTEN_MS: i64 = 86_400_000;

/// The workers that claimed from `queue` (every pull queue: `None`) in the
/// last day, at `now`, by queue and name, with the tasks each holds; those
/// not seen for longer are deleted. At most 1,000.
pub(crate) async fn workers(
    db: &Db,
    queue: Option<&str>,
    now: i64,
) -> Result<Vec<WorkerRow>, Error> {
    let forget = "DELETE FROM ttw_workers WHERE last_seen < $1";
    let sql = format!(
        "SELECT w.queue, w.worker, w.last_seen, \
         (SELECT COUNT(*) FROM ttw_tasks t WHERE t.queue = w.queue AND t.locked_by = w.worker \
          AND t.state = 'running' AND t.lock_epoch = {WORKER} AND t.locked_until >= $2) AS held \
         FROM ttw_workers w WHERE w.last_seen >= $1 AND (CAST($3 AS TEXT) IS NULL OR w.queue = $3) \
         ORDER BY w.queue, w.worker LIMIT 1000"
    );
    let since = now.saturating_sub(WORKER_FORGOTTEN_MS);
    let turn = db.write_turn(Urgency::Ordinary).await;
    let rows = with_pool!(db, pool => {
        let rows: Vec<WorkerRow> = sqlx::query_as(&sql)
            .bind(since)
            .bind(now)
            .bind(queue)
            .fetch_all(pool)
            .await?;
        sqlx::query(forget).bind(since).execute(pool).await?;
        rows
    });
    drop(turn);
    Ok(rows)
}

/// One ack of a group: task `id` under `claim`, `answer` kept as its
/// attempt's; `allowed` says whether the caller may use the task's queue.
pub(crate) struct Acking<'a> {
    pub(crate) id: i64,
    pub(crate) claim: i64,
    pub(crate) answer: Option<&'a str>,
    pub(crate) allowed: &'a (dyn Fn(&str) -> bool + Sync),
}

/// Marks each task of `acks` done under its claim (see [`held`]) at `now`,
/// moved to the history with its callback, all in one transaction (one
/// commit for many workers' acks). Answers each ack in order (its queue,
/// whose held-back claims may have room now), and the callback tasks the
/// group wrote.
pub(crate) async fn ack(
    db: &Db,
    names: &Names,
    acks: &[Acking<'_>],
    now: i64,
) -> Result<(Vec<Settled<String>>, Vec<Announced>), Error> {
    let into = into_history("done", &db.clock_sql(), "$3");
    let copy = format!(
        "INSERT INTO ttw_history ({HISTORY_COLUMNS}, answer_status, answer) \
         SELECT {into}, NULL, $4 FROM ttw_tasks WHERE {}",
        held()
    );
    let turn = db.write_turn(Urgency::Ordinary).await;
    let done = with_pool!(db, pool => {
        let mut tx = pool.begin().await?;
        // In id order, so that two groups lock the tasks they share in the
        // same order (no deadlock on PostgreSQL); answered in the group's.
        let mut order: Vec<usize> = (0..acks.len()).collect();
        order.sort_by_key(|&i| acks[i].id);
        let mut answers: Vec<Option<Settled<String>>> = vec![None; acks.len()];
        let mut done_ids = Vec::new();
        for &i in &order {
            let ack = &acks[i];
            let answer = ack.answer.map(bounded_str);
            let settled = match find_held!(tx, db, ack.id, ack.claim, now) {
                None => Settled::Stale,
                Some(row) if !(ack.allowed)(&row.queue) => Settled::NotAllowed(row.queue),
                Some(row) => {
                    sqlx::query(&copy)
                        .bind(ack.id)
                        .bind(ack.claim)
                        .bind(now)
                        .bind(answer)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query("DELETE FROM ttw_tasks WHERE id = $1")
                        .bind(ack.id)
                        .execute(&mut *tx)
                        .await?;
                    done_ids.push(ack.id);
                    Settled::Yes(row.queue)
                }
            };
            answers[i] = Some(settled);
        }
        let answers: Vec<Settled<String>> = answers.into_iter().flatten().collect();
        let told = if done_ids.is_empty() {
            Vec::new()
        } else {
            callbacks::tell(
                Conn::from(&mut *tx),
                &db.clock_sql(),
                names.channel.as_deref(),
                Told::Done,
                &done_ids,
                now,
            )
            .await?
        };
        tx.commit().await?;
        (answers, told)
    });
    drop(turn);
    Ok(done)
}

/// What a nack asks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Nacking<'a> {
    pub(crate) id: i64,
    pub(crate) claim: i64,
    pub(crate) now: i64,
    pub(crate) error: &'a str,
    /// Retry this many ms from now, not after the backoff.
    pub(crate) retry_in: Option<i64>,
    /// Give up: dead now, whatever attempts are left.
    pub(crate) dead: bool,
    /// The backoff when neither `retry_in` nor the queue's own applies.
    pub(crate) backoff: Backoff,
    /// The attempt limit of a task with none of its own or its queue's.
    pub(crate) default_max: i64,
}

/// What a nack did: the task scheduled again at this time (ms), or dead;
/// with its queue, whose held-back claims may have room now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Nacked {
    Retry(i64, String),
    Dead(String),
}

/// Records a failed attempt of the task a worker holds (see [`held`]): a
/// retry after `retry_in`, else the queue's backoff, else `backoff`; dead
/// when out of attempts or when asked; its row in `ttw_attempts` naming
/// the worker; a dead task's failure callback; in one transaction, the
/// retry announced to the schedulers.
pub(crate) async fn nack(
    db: &Db,
    names: &Names,
    nack: Nacking<'_>,
    allowed: &(dyn Fn(&str) -> bool + Sync),
) -> Result<(Settled<Nacked>, Vec<Announced>, Option<Announced>), Error> {
    let update = names.announcing(&format!(
        "UPDATE ttw_tasks SET {}, last_error = $5, {UNLOCK}, updated_at = {} \
         WHERE {} RETURNING {ANNOUNCED}, state",
        retry_or_dead("$6", "$4", "$3", "$7"),
        db.clock_sql(),
        held()
    ));
    let record = format!(
        "INSERT INTO ttw_attempts ({ATTEMPT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, $8) \
         ON CONFLICT DO NOTHING"
    );
    #[derive(sqlx::FromRow)]
    struct Row {
        #[sqlx(flatten)]
        announced: AnnouncedRow,
        state: String,
    }
    let turn = db.write_turn(Urgency::Ordinary).await;
    let done = with_pool!(db, pool => {
        let mut tx = pool.begin().await?;
        match find_held!(tx, db, nack.id, nack.claim, nack.now) {
            None => (Settled::Stale, Vec::new(), None),
            Some(row) if !allowed(&row.queue) => {
                (Settled::NotAllowed(row.queue), Vec::new(), None)
            }
            Some(row) => {
                let delay = match nack.retry_in {
                    Some(ms) => ms,
                    None => {
                        let own = crate::sql::queues::queue_backoff(db, &row.queue).await?;
                        let attempt = u32::try_from(row.attempts).unwrap_or(u32::MAX);
                        crate::model::time::ms(
                            own.unwrap_or(nack.backoff).delay(attempt, nack.id as u64),
                        )
                    }
                };
                let changed: Row = sqlx::query_as(&update)
                    .bind(nack.id)
                    .bind(nack.claim)
                    .bind(nack.now)
                    .bind(nack.now.saturating_add(delay))
                    .bind(bounded_str(nack.error))
                    .bind(nack.default_max)
                    .bind(i64::from(nack.dead))
                    .fetch_one(&mut *tx)
                    .await?;
                let dead = changed.state == "dead";
                sqlx::query(&record)
                    .bind(nack.id)
                    .bind(nack.claim)
                    .bind(row.attempts)
                    .bind(row.locked_by.as_deref())
                    .bind(row.started_at)
                    .bind(nack.now)
                    .bind(if dead { "dead" } else { "failed" })
                    .bind(bounded_str(nack.error))
                    .execute(&mut *tx)
                    .await?;
                let mut told = Vec::new();
                if dead {
                    told = callbacks::tell(
                        Conn::from(&mut *tx),
                        &db.clock_sql(),
                        names.channel.as_deref(),
                        Told::Dead,
                        &[nack.id],
                        nack.now,
                    )
                    .await?;
                }
                tx.commit().await?;
                let announced = Announced::from(changed.announced);
                if dead {
                    (Settled::Yes(Nacked::Dead(row.queue)), told, None)
                } else {
                    let at = announced.run_at;
                    (Settled::Yes(Nacked::Retry(at, row.queue)), told, Some(announced))
                }
            }
        }
    });
    drop(turn);
    Ok(done)
}

/// Moves the lease of the task a worker holds (see [`held`]) to end at
/// `until`. Answers the queue's name with it, for the caller's check.
pub(crate) async fn extend(
    db: &Db,
    id: i64,
    claim: i64,
    now: i64,
    until: i64,
    allowed: &(dyn Fn(&str) -> bool + Sync),
) -> Result<Settled<()>, Error> {
    let sql = format!("UPDATE ttw_tasks SET locked_until = $4 WHERE {}", held());
    let turn = db.write_turn(Urgency::Ordinary).await;
    let done = with_pool!(db, pool => {
        let mut tx = pool.begin().await?;
        match find_held!(tx, db, id, claim, now) {
            None => Settled::Stale,
            Some(row) if !allowed(&row.queue) => Settled::NotAllowed(row.queue),
            Some(_) => {
                sqlx::query(&sql)
                    .bind(id)
                    .bind(claim)
                    .bind(now)
                    .bind(until)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Settled::Yes(())
            }
        }
    });
    drop(turn);
    Ok(done)
}

impl Claims {
    /// On PostgreSQL, tells the processes listening on the store's channel
    /// that `n` tasks of each pull queue of `queues` fell due
    /// (`pull:<n>:<queue>`): as many of their waiting claims look again. Nothing on SQLite, whose one
    /// process heard it in-process.
    pub(crate) async fn announce_pulls(&self, queues: &[(Arc<str>, usize)]) -> Result<(), Error> {
        match &self.db {
            #[cfg(feature = "postgres")]
            Db::Postgres(pool) => {
                let Some(channel) = &self.channel else {
                    return Ok(());
                };
                let payloads: Vec<String> = queues
                    .iter()
                    .map(|(q, n)| format!("{PULL}{n}:{q}"))
                    .collect();
                sqlx::query("SELECT pg_notify($1, p) FROM UNNEST(CAST($2 AS TEXT[])) AS p")
                    .bind(channel)
                    .bind(&payloads)
                    .execute(pool)
                    .await?;
            }
            #[cfg(feature = "sqlite")]
            Db::Sqlite(..) => {
                let _ = queues;
            }
        }
        Ok(())
    }
}

/// The `NOTIFY` payload's prefix that says a pull queue's tasks fell due.
#[cfg(feature = "postgres")]
pub(crate) const PULL: &str = "pull:";
