//! The statements a scheduler runs on tasks, one method each: the window
//! loads (the due window and the catch-up poll), the fenced claim, the look
//! at why a fired task was not claimed, the fenced outcomes (complete,
//! fail), the reclaim of tasks whose delivery ended without an outcome, and
//! the retention sweep. The fragments they share are in `fence.rs`, the rows
//! they read and answer in `rows.rs`, their two macros in `macros.rs`.

use std::sync::Arc;

use crate::error::Error;
use crate::model::attempt::Attempt;
use crate::model::attempts::bounded_str;
use crate::model::lanes::Lanes;
use crate::model::task::TaskState;
use crate::sql::announce::key_hash;
use crate::sql::announce::Announced;
use crate::sql::attempts::ATTEMPT_COLUMNS;
use crate::sql::callbacks::{self, Tell, Told};
use crate::sql::db::{
    placeholders, priority_from_sql, with_pool, write_with_pool, Conn, Db, Urgency,
};
use crate::sql::history::{into_history, HISTORY_COLUMNS};

#[macro_use]
mod macros;
mod fence;
mod limited;
mod rows;

use fence::{checked, fenced, in_held_shard, retry_or_dead, task_lane, uncontrolled, UNLOCK};
pub(crate) use limited::Wait;
use rows::{
    claimed, ChangedRow, ClaimedRow, DueRow, FailedRow, ReclaimedRow, UnclaimedRow, DUE_COLUMNS,
};
pub(crate) use rows::{
    AttemptFailed, Changes, Claimed, Claiming, Due, Failed, Finished, Reclaimed, Since, Success,
    Unclaimed,
};

/// `ids` as a PostgreSQL array literal: `{1,2,3}`.
fn array_text(ids: impl Iterator<Item = i64>) -> String {
    use std::fmt::Write;
    let mut text = String::with_capacity(256);
    text.push('{');
    for (i, id) in ids.enumerate() {
        if i > 0 {
            text.push(',');
        }
        let _ = write!(text, "{id}");
    }
    text.push('}');
    text
}

/// The ids of the tasks of `batch` that have a callback to tell, among
/// those `written` (id, claim).
fn telling(batch: &[Finished], written: &[(i64, i64)]) -> Vec<i64> {
    let mut written: Vec<i64> = written.iter().map(|(id, _)| *id).collect();
    written.sort_unstable();
    batch
        .iter()
        .filter(|f| f.tell && written.binary_search(&f.success.id).is_ok())
        .map(|f| f.success.id)
        .collect()
}

/// The ids of the reclaimed tasks that died (out of attempts).
fn died(rows: &[ReclaimedRow]) -> Vec<i64> {
    rows.iter()
        .filter(|row| row.state == "dead")
        .map(|row| row.task.id)
        .collect()
}

/// The statements of one scheduler session.
#[derive(Clone)]
pub(crate) struct Claims {
    db: Db,
    shards: i64,
    session: String,
    lanes: Arc<Lanes>,
    /// On PostgreSQL, the channel a limited claim announces a place left
    /// to another node on (see [`ROOM`](crate::sql::announce::ROOM)).
    channel: Option<String>,
    /// Where this process's schedulers hear of the callback tasks the
    /// outcomes write (see [`callbacks`]).
    told: Option<Tell>,
}

impl Claims {
    /// Statements for session `session` serving the queues of `lanes`.
    pub(crate) fn new(db: Db, lanes: Arc<Lanes>, shards: u32, session: String) -> Claims {
        Claims {
            db,
            shards: i64::from(shards),
            session,
            lanes,
            channel: None,
            told: None,
        }
    }

    /// The same, telling `told` of the callback tasks its outcomes write,
    /// once they commit.
    pub(crate) fn telling(mut self, told: Tell) -> Claims {
        self.told = Some(told);
        self
    }

    /// Writes on `conn` the callback tasks of the `told` outcomes of `ids`
    /// (see [`callbacks::tell`]).
    async fn tell(
        &self,
        conn: Conn<'_>,
        told: Told,
        ids: &[i64],
        now: i64,
    ) -> Result<Vec<Announced>, Error> {
        callbacks::tell(
            conn,
            &self.db.clock_sql(),
            self.channel.as_deref(),
            told,
            ids,
            now,
        )
        .await
    }

    /// Hands the callback tasks a committed outcome wrote to this
    /// process's schedulers.
    fn hand_over(&self, tasks: Vec<Announced>) {
        if let (false, Some(told)) = (tasks.is_empty(), &self.told) {
            told(tasks);
        }
    }

    /// The same, announcing on `channel` (PostgreSQL's) when a limited
    /// claim leaves a place to a node waiting for it.
    pub(crate) fn announcing_on(mut self, channel: Option<String>) -> Claims {
        self.channel = channel;
        self
    }

    /// A task read back as due, if its queue is one this node serves.
    fn due(&self, row: DueRow) -> Option<Due> {
        Some(Due {
            id: row.id,
            run_at: row.run_at,
            lane: self.lanes.lane(&row.queue, row.id)?,
            priority: priority_from_sql(row.priority),
            key: key_hash(row.partition_key.as_deref()),
        })
    }

    /// The condition that a task's id is one of `n` ids, bound from
    /// parameter `$first` on by [`bind_ids`]. On PostgreSQL one array
    /// parameter, `id = ANY($first)`: one statement text for every count,
    /// and a plan that looks the ids up by primary key. With a list of
    /// parameters PostgreSQL's generic plan for the claim scanned every
    /// due row through the `(state, run_at)` index instead, and a claim
    /// of a few ids among 20,000 due took 200-400 ms. On SQLite a list of
    /// parameters, which it looks up by rowid.
    fn ids_are(&self, first: usize, n: usize) -> String {
        if self.on_sqlite() {
            format!("id IN ({})", placeholders(first, n))
        } else {
            format!("id = ANY(CAST(${first} AS BIGINT[]))")
        }
    }

    /// Whether the statements that take tasks by id keep a prepared plan:
    /// on SQLite, yes. On PostgreSQL they are planned at each run (an
    /// unnamed statement), with the ids at hand and the table as it is:
    /// a plan kept from when the table was young (a few hundred rows, never
    /// analyzed) read the whole table for each claim and each batch of
    /// outcomes until autovacuum first analyzed it, and tasks ran seconds
    /// late meanwhile. Planning a statement that claims or settles many
    /// tasks costs little beside it.
    fn keeps_plans(&self) -> bool {
        self.on_sqlite()
    }

    /// Whether these statements run on SQLite, whose one writer makes every
    /// write transaction wait for the one before it.
    pub(crate) fn on_sqlite(&self) -> bool {
        self.db.is_sqlite()
    }

    /// The database these statements run on.
    pub(crate) fn db(&self) -> &Db {
        &self.db
    }

    /// The session these statements are bound to.
    pub(crate) fn session(&self) -> &str {
        &self.session
    }

    /// Scheduled tasks of this session's shards due before `horizon`.
    pub(crate) async fn due_before(&self, horizon: i64) -> Result<Vec<Due>, Error> {
        let sql = format!(
            "SELECT {DUE_COLUMNS} FROM ttw_tasks WHERE state = 'scheduled' AND run_at < $1 AND {}",
            in_held_shard("$3", "$2")
        );
        let rows: Vec<DueRow> = with_pool!(&self.db, pool => {
            sqlx::query_as(&sql)
                .bind(horizon)
                .bind(self.shards)
                .bind(&self.session)
                .fetch_all(pool)
                .await?
        });
        Ok(rows.into_iter().filter_map(|row| self.due(row)).collect())
    }

    /// One catch-up poll in one statement: the database's clock, and the
    /// scheduled tasks of this session's shards due before `horizon` whose
    /// change stamp is at or after `since` (or, on the first poll, `slack`
    /// before that clock).
    pub(crate) async fn changed_since(&self, look: Since) -> Result<Changes, Error> {
        let Since {
            horizon,
            since,
            slack,
        } = look;
        let sql = format!(
            "WITH c AS (SELECT {} AS db_now) \
             SELECT c.db_now, {DUE_COLUMNS} FROM c LEFT JOIN ttw_tasks \
             ON ttw_tasks.state = 'scheduled' AND ttw_tasks.run_at < $1 \
             AND ttw_tasks.updated_at >= COALESCE($2, c.db_now - $5) AND {}",
            self.db.clock_sql(),
            in_held_shard("$4", "$3")
        );
        let rows: Vec<ChangedRow> = with_pool!(&self.db, pool => {
            sqlx::query_as(&sql)
                .bind(horizon)
                .bind(since)
                .bind(self.shards)
                .bind(&self.session)
                .bind(slack)
                .fetch_all(pool)
                .await?
        });
        let db_now = rows
            .first()
            .map(|r| r.db_now)
            .ok_or_else(|| Error::corrupt("no clock reading came back from the database"))?;
        let due = rows
            .into_iter()
            .filter_map(|row| self.due(row.task()?))
            .collect();
        Ok(Changes { db_now, due })
    }

    /// The claim, in one statement: of the fired tasks (in id order),
    /// those still scheduled, due by `now`, in a lane whose lease this
    /// session holds, and in a queue with no flow control (see
    /// [`uncontrolled`]) move to running, with the attempt counted, the
    /// session and lease epoch stamped, and a lock until `locked_until`.
    /// The tasks of a paused or limited queue are left to
    /// [`claim_limited`](Self::claim_limited).
    pub(crate) async fn claim(&self, claim: Claiming<'_>) -> Result<Vec<Claimed>, Error> {
        let Claiming {
            fired,
            now,
            locked_until,
        } = claim;
        let sql = self.claim_sql(fired.len(), true);
        let claimed = write_with_pool!(&self.db, Urgency::Urgent, pool => {
            let query = sqlx::query_as::<_, ClaimedRow>(&sql)
                .persistent(self.keeps_plans())
                .bind(&self.session)
                .bind(self.shards)
                .bind(locked_until)
                .bind(now);
            let query = bind_ids!(self, query, fired.iter().map(|due| due.id));
            claimed(query.fetch_all(pool).await?, fired)
        });
        Ok(claimed)
    }

    /// The claim statement for `n` ids: parameters `$1` session, `$2`
    /// shards, `$3` the lock, `$4` now, `$5...` the ids. `guarded`: only
    /// tasks of queues without flow control.
    fn claim_sql(&self, n: usize, guarded: bool) -> String {
        let guard = if guarded {
            format!(" AND {}", uncontrolled())
        } else {
            String::new()
        };
        format!(
            "UPDATE ttw_tasks SET state = 'running', attempts = attempts + 1, claims = claims + 1, locked_by = $1, \
             lock_epoch = (SELECT l.epoch FROM ttw_leases l WHERE {}), \
             locked_until = $3, started_at = $4, updated_at = {} \
             WHERE {} AND {} \
             RETURNING id, run_at, attempts, claims, payload, idempotency_key, envelope",
            task_lane("$2"),
            self.db.clock_sql(),
            self.ids_are(5, n),
            checked(&format!(
                "state = 'scheduled' AND run_at <= $4 AND {}{guard}",
                in_held_shard("$1", "$2")
            )),
        )
    }

    /// Of `ids`, which a claim did not take, each as it is now, and whether
    /// this session holds its shard.
    pub(crate) async fn why_unclaimed(&self, ids: &[i64]) -> Result<Vec<Unclaimed>, Error> {
        let sql = format!(
            "SELECT ttw_tasks.id, ttw_tasks.state, ttw_tasks.run_at, \
             CASE WHEN {} THEN 1 ELSE 0 END AS held, \
             CASE WHEN {} THEN 0 ELSE 1 END AS controlled \
             FROM ttw_tasks WHERE {}",
            in_held_shard("$1", "$2"),
            uncontrolled(),
            self.ids_are(3, ids.len()).replace("id ", "ttw_tasks.id ")
        );
        let rows = with_pool!(&self.db, pool => {
            let query = sqlx::query_as::<_, UnclaimedRow>(&sql)
                .persistent(self.keeps_plans())
                .bind(&self.session)
                .bind(self.shards);
            bind_ids!(self, query, ids.iter().copied()).fetch_all(pool).await?
        });
        rows.into_iter().map(Unclaimed::try_from).collect()
    }

    /// Marks done every task of `batch` whose attempt still holds it, each
    /// row under its own fence (see [`fenced`]), and moves it to
    /// `ttw_history` (see [`history`](crate::sql::history)) with its
    /// attempt's receipt (the answer's status and first bytes), in one
    /// transaction: a stale attempt's row is refused and the others are
    /// written. Answers the successes written.
    pub(crate) async fn complete_many(
        &self,
        batch: &[Finished],
        now: i64,
    ) -> Result<Vec<Success>, Error> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let into = into_history("done", &self.db.clock_sql(), "$1");
        let mut told = Vec::new();
        let turn = self.db.write_turn(Urgency::Ordinary).await;
        // Read to its end (see the notes of `db`).
        let written: Vec<(i64, i64)> = match &self.db {
            // One statement: the rows deleted under their fence are the
            // rows inserted into the history. One statement text for every
            // batch size: the ids, claims, statuses and answers as arrays.
            #[cfg(feature = "postgres")]
            Db::Postgres(pool) => {
                crate::sql::primary::unless_moved(async {
                    Ok::<_, Error>({
                        let sql = format!(
                            "WITH moved AS (DELETE FROM ttw_tasks \
                     USING UNNEST($4::BIGINT[], $5::BIGINT[], $6::INT[], $7::TEXT[]) \
                     AS v(task, claim, answer_status, answer) \
                     WHERE ttw_tasks.id = v.task AND {} \
                     RETURNING ttw_tasks.*, v.answer_status, v.answer) \
                     INSERT INTO ttw_history ({HISTORY_COLUMNS}, answer_status, answer) \
                     SELECT {into}, answer_status, answer FROM moved RETURNING id, claims",
                            fence::fence("v.claim", "$2", "$3")
                        );
                        let ids: Vec<i64> = batch.iter().map(|f| f.success.id).collect();
                        let claims: Vec<i64> = batch.iter().map(|f| f.success.claim).collect();
                        let statuses: Vec<Option<i32>> = batch
                            .iter()
                            .map(|f| f.receipt.status_code().map(i32::from))
                            .collect();
                        let answers: Vec<Option<&str>> =
                            batch.iter().map(|f| f.receipt.answer_text()).collect();
                        let query = sqlx::query_as(&sql)
                            .persistent(false)
                            .bind(now)
                            .bind(&self.session)
                            .bind(self.shards)
                            .bind(ids)
                            .bind(claims)
                            .bind(statuses)
                            .bind(answers);
                        if batch.iter().any(|f| f.tell) {
                            // The successes and their callbacks in one transaction.
                            let mut tx = pool.begin().await?;
                            let written: Vec<(i64, i64)> = query.fetch_all(&mut *tx).await?;
                            let ids = telling(batch, &written);
                            told = self
                                .tell(Conn::Postgres(&mut tx), Told::Done, &ids, now)
                                .await?;
                            tx.commit().await?;
                            written
                        } else {
                            query.fetch_all(pool).await?
                        }
                    })
                })
                .await?
            }
            // Two statements in one transaction, under this process's
            // write turn and SQLite's one writer: copy the fenced rows,
            // then delete exactly those copied. A list of (id, claim) rows,
            // padded with rows that match no task to the next power of
            // two, so that a few statements serve every batch size. Only a
            // batch with a receipt to keep (a webhook's) binds each row's
            // status and answer too: twice the parameters, which cost the
            // drain of handlers' tasks a quarter of its rate when every
            // batch bound them.
            #[cfg(feature = "sqlite")]
            Db::Sqlite(pool, _) => {
                let n = batch.len().next_power_of_two();
                let receipts = batch.iter().any(|f| !f.receipt.is_empty());
                let per_row = if receipts { 4 } else { 2 };
                let rows = (0..n)
                    .map(|i| {
                        let p = 4 + per_row * i;
                        if receipts {
                            format!("(${p}, ${}, ${}, ${})", p + 1, p + 2, p + 3)
                        } else {
                            format!("(${p}, ${})", p + 1)
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                let fence = checked(&fence::still_held("$2", "$3"));
                let copy = if receipts {
                    format!(
                        "INSERT INTO ttw_history ({HISTORY_COLUMNS}, answer_status, answer) \
                         SELECT {into}, v.column3, v.column4 FROM (VALUES {rows}) AS v \
                         JOIN ttw_tasks ON ttw_tasks.id = v.column1 AND ttw_tasks.claims = v.column2 \
                         WHERE {fence} RETURNING id, claims"
                    )
                } else {
                    format!(
                        "INSERT INTO ttw_history ({HISTORY_COLUMNS}) SELECT {into} FROM ttw_tasks \
                         WHERE (id, claims) IN (VALUES {rows}) AND {fence} RETURNING id, claims"
                    )
                };
                let delete = format!("DELETE FROM ttw_tasks WHERE id IN ({})", placeholders(1, n));
                let mut tx = pool.begin().await?;
                let mut query = sqlx::query_as(&copy)
                    .bind(now)
                    .bind(&self.session)
                    .bind(self.shards);
                for finished in batch {
                    query = query.bind(finished.success.id).bind(finished.success.claim);
                    if receipts {
                        query = query
                            .bind(finished.receipt.status_code().map(i32::from))
                            .bind(finished.receipt.answer_text());
                    }
                }
                for _ in batch.len()..n {
                    query = query.bind(-1_i64).bind(-1_i64);
                    if receipts {
                        query = query.bind(None::<i32>).bind(None::<&str>);
                    }
                }
                let written: Vec<(i64, i64)> = query.fetch_all(&mut *tx).await?;
                if !written.is_empty() {
                    let mut query = sqlx::query(&delete);
                    for (id, _) in &written {
                        query = query.bind(id);
                    }
                    for _ in written.len()..n {
                        query = query.bind(-1_i64);
                    }
                    query.execute(&mut *tx).await?;
                }
                if batch.iter().any(|f| f.tell) {
                    let ids = telling(batch, &written);
                    told = self
                        .tell(Conn::Sqlite(&mut tx), Told::Done, &ids, now)
                        .await?;
                }
                tx.commit().await?;
                written
            }
        };
        drop(turn);
        self.hand_over(told);
        Ok(written
            .into_iter()
            .map(|(id, claim)| Success { id, claim })
            .collect())
    }

    /// Records a failed attempt under the same fence as
    /// [`complete_many`](Self::complete_many): a retry at its `retry_at`, or
    /// dead once the attempts reach the task's limit (`default_max` when it
    /// has none), or at once when `dead_now`; and, in the same transaction,
    /// the attempt's row in `ttw_attempts`. `None` if the fence refused it.
    pub(crate) async fn fail(
        &self,
        attempt: &Attempt,
        failed: AttemptFailed<'_>,
    ) -> Result<Option<Failed>, Error> {
        let update = format!(
            "UPDATE ttw_tasks SET {}, last_error = $8, {UNLOCK}, updated_at = {} \
             WHERE {} RETURNING id, claims, attempts, started_at, state, run_at",
            retry_or_dead("$6", "$7", "$3", "$9"),
            self.db.clock_sql(),
            fenced("$1", "$2", "$4", "$5")
        );
        let status = failed.status.map(i32::from);
        let detail = bounded_str(failed.error);
        let mut told = Vec::new();
        let turn = self.db.write_turn(Urgency::Ordinary).await;
        // Read to its end (see the notes of `db`).
        let row: Option<FailedRow> = match &self.db {
            // One statement: the row updated under its fence is the
            // attempt recorded.
            #[cfg(feature = "postgres")]
            Db::Postgres(pool) => {
                crate::sql::primary::unless_moved(async {
                    Ok::<_, Error>({
                        let sql = format!(
                    "WITH f AS ({update}), a AS (INSERT INTO ttw_attempts ({ATTEMPT_COLUMNS}) \
                     SELECT id, claims, attempts, $4, started_at, $3, \
                     CASE WHEN state = 'dead' THEN 'dead' ELSE 'failed' END, $10, $11 FROM f \
                     ON CONFLICT DO NOTHING) \
                     SELECT id, claims, attempts, started_at, state, run_at FROM f"
                );
                        let query = bind_failed!(
                            sqlx::query_as(&sql).persistent(self.keeps_plans()),
                            attempt,
                            failed,
                            &self.session,
                            self.shards
                        )
                        .bind(status)
                        .bind(detail);
                        if attempt.tells.dead {
                            // The death and its callback in one transaction.
                            let mut tx = pool.begin().await?;
                            let rows: Vec<FailedRow> = query.fetch_all(&mut *tx).await?;
                            let row = rows.into_iter().next();
                            if row.as_ref().is_some_and(|r| r.state == "dead") {
                                let conn = Conn::Postgres(&mut tx);
                                told = self
                                    .tell(conn, Told::Dead, &[attempt.id], failed.now)
                                    .await?;
                            }
                            tx.commit().await?;
                            row
                        } else {
                            let rows: Vec<FailedRow> = query.fetch_all(pool).await?;
                            rows.into_iter().next()
                        }
                    })
                })
                .await?
            }
            // Two statements in one transaction, under SQLite's one writer.
            #[cfg(feature = "sqlite")]
            Db::Sqlite(pool, _) => {
                let mut tx = pool.begin().await?;
                let rows: Vec<FailedRow> = bind_failed!(
                    sqlx::query_as(&update).persistent(self.keeps_plans()),
                    attempt,
                    failed,
                    &self.session,
                    self.shards
                )
                .fetch_all(&mut *tx)
                .await?;
                let row = rows.into_iter().next();
                if let Some(row) = &row {
                    let sql = format!(
                        "INSERT INTO ttw_attempts ({ATTEMPT_COLUMNS}) VALUES \
                         ($1, $2, $3, $4, $5, $6, \
                         CASE WHEN $7 = 'dead' THEN 'dead' ELSE 'failed' END, $8, $9) \
                         ON CONFLICT DO NOTHING"
                    );
                    sqlx::query(&sql)
                        .bind(row.id)
                        .bind(row.claims)
                        .bind(row.attempts)
                        .bind(&self.session)
                        .bind(row.started_at)
                        .bind(failed.now)
                        .bind(&row.state)
                        .bind(status)
                        .bind(detail)
                        .execute(&mut *tx)
                        .await?;
                    if attempt.tells.dead && row.state == "dead" {
                        let conn = Conn::Sqlite(&mut tx);
                        told = self
                            .tell(conn, Told::Dead, &[attempt.id], failed.now)
                            .await?;
                    }
                }
                tx.commit().await?;
                row
            }
        };
        drop(turn);
        self.hand_over(told);
        match row {
            None => Ok(None),
            Some(row) => Ok(Some(match TaskState::from_sql(&row.state)? {
                TaskState::Dead => Failed::Dead,
                _ => Failed::Retry(row.run_at),
            })),
        }
    }

    /// Running tasks of this session's shards go back to scheduled, due at
    /// once, or to dead when out of attempts: those claimed under an earlier
    /// epoch of the shard's lease by a session proven dead (its membership
    /// row is gone: its process was found gone, or its node id started
    /// again), and those whose lock ran out. A task whose claimer is only
    /// silent waits for its lock: that node may be alive and still running
    /// the handler, which its own `callback_timeout` ends before the lock
    /// does. `now` is the node's clock: locks that ran out before it are
    /// taken back.
    pub(crate) async fn reclaim(
        &self,
        default_max: i64,
        now: i64,
    ) -> Result<Vec<Reclaimed>, Error> {
        let taken_back = format!(
            "ttw_tasks.state = 'running' \
             AND EXISTS (SELECT 1 FROM ttw_leases l WHERE {} AND l.owner_session = $4 \
             AND (ttw_tasks.locked_until < $2 \
             OR ((ttw_tasks.lock_epoch IS NULL OR ttw_tasks.lock_epoch < l.epoch) \
             AND NOT EXISTS (SELECT 1 FROM ttw_nodes n WHERE n.session = ttw_tasks.locked_by))))",
            task_lane("$3")
        );
        let why = "CASE WHEN ttw_tasks.locked_until < $2 \
             THEN 'lock expired: the node delivering it stopped or lost its shard' \
             ELSE 'the node delivering it died; the shard''s new owner took it back' END";
        let set = format!(
            "{}, last_error = {why}, {UNLOCK}, updated_at = {}",
            retry_or_dead("$1", "$2", "$2", "0"),
            self.db.clock_sql(),
        );
        let turn = self.db.write_turn(Urgency::Ordinary).await;
        // Read to its end (see the notes of `db`). Each task taken back
        // leaves the attempt the crash cut short in `ttw_attempts`, as
        // `interrupted`, with the session that ran it and when it started.
        let (rows, told): (Vec<ReclaimedRow>, Vec<Announced>) = match &self.db {
            // One statement: the rows locked first are the rows updated,
            // and their session and start (which the update clears) are
            // read from the lock; then, in its transaction, the callbacks
            // of those that died.
            #[cfg(feature = "postgres")]
            Db::Postgres(pool) => crate::sql::primary::unless_moved(async {
 Ok::<_, Error>({
                let sql = format!(
                    "WITH old AS (SELECT id AS old_id, locked_by AS old_by, started_at AS old_start \
                     FROM ttw_tasks WHERE {taken_back} FOR UPDATE), \
                     r AS (UPDATE ttw_tasks SET {set} FROM old WHERE ttw_tasks.id = old.old_id \
                     RETURNING ttw_tasks.*, old.old_by, old.old_start), \
                     a AS (INSERT INTO ttw_attempts ({ATTEMPT_COLUMNS}) \
                     SELECT id, claims, attempts, old_by, old_start, $2, 'interrupted', NULL, last_error \
                     FROM r ON CONFLICT DO NOTHING) \
                     SELECT {DUE_COLUMNS}, state FROM r"
                );
                let mut tx = pool.begin().await?;
                let rows: Vec<ReclaimedRow> = sqlx::query_as(&sql)
                    .bind(default_max)
                    .bind(now)
                    .bind(self.shards)
                    .bind(&self.session)
                    .fetch_all(&mut *tx)
                    .await?;
                let dead = died(&rows);
                let told = self
                    .tell(Conn::Postgres(&mut tx), Told::Dead, &dead, now)
                    .await?;
                tx.commit().await?;
                (rows, told)
            })
 }).await?,
            // Two statements in one transaction, under SQLite's one writer:
            // the attempts recorded, then the same rows taken back.
            #[cfg(feature = "sqlite")]
            Db::Sqlite(pool, _) => {
                let record = format!(
                    "INSERT INTO ttw_attempts ({ATTEMPT_COLUMNS}) \
                     SELECT id, claims, attempts, locked_by, started_at, $2, 'interrupted', NULL, {why} \
                     FROM ttw_tasks WHERE {taken_back} ON CONFLICT DO NOTHING"
                );
                let update = format!(
                    "UPDATE ttw_tasks SET {set} WHERE {taken_back} RETURNING {DUE_COLUMNS}, state"
                );
                let mut tx = pool.begin().await?;
                sqlx::query(&record)
                    .bind(default_max)
                    .bind(now)
                    .bind(self.shards)
                    .bind(&self.session)
                    .execute(&mut *tx)
                    .await?;
                let rows: Vec<ReclaimedRow> = sqlx::query_as(&update)
                    .bind(default_max)
                    .bind(now)
                    .bind(self.shards)
                    .bind(&self.session)
                    .fetch_all(&mut *tx)
                    .await?;
                let dead = died(&rows);
                let told = self
                    .tell(Conn::Sqlite(&mut tx), Told::Dead, &dead, now)
                    .await?;
                tx.commit().await?;
                (rows, told)
            }
        };
        drop(turn);
        self.hand_over(told);
        rows.into_iter()
            .filter_map(|row| {
                let dead = match TaskState::from_sql(&row.state) {
                    Ok(state) => state == TaskState::Dead,
                    Err(err) => return Some(Err(err)),
                };
                // Only the queues this node serves hold leases of its own.
                let index = self.lanes.queue_index(&row.task.queue)?;
                Some(Ok(Reclaimed {
                    queue: index,
                    dead,
                    due: if dead { None } else { self.due(row.task) },
                }))
            })
            .collect()
    }

    /// The retention sweep (see [`history::sweep`](crate::sql::history::sweep)).
    pub(crate) async fn sweep(&self, before: i64, batch: u64) -> Result<u64, Error> {
        crate::sql::history::sweep(&self.db, before, batch).await
    }
}

#[cfg(test)]
mod tests;
