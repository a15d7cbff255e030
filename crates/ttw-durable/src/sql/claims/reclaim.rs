//! The reclaim of tasks whose delivery ended without an outcome (a dead
//! node's, or one whose lock ran out, or a worker's whose lease ran out),
//! and the retention sweep.

use super::pull::WORKER;
use super::*;

/// The ids of the reclaimed tasks that died (out of attempts).
fn died(rows: &[ReclaimedRow]) -> Vec<i64> {
    rows.iter()
        .filter(|row| row.state == "dead")
        .map(|row| row.task.id)
        .collect()
}

impl Claims {
    /// Running tasks of this session's shards go back to scheduled, due at
    /// once, or to dead when out of attempts: those claimed under an earlier
    /// epoch of the shard's lease by a session proven dead (its membership
    /// row is gone: its process was found gone, or its node id started
    /// again), and those whose lock ran out. A task whose claimer is only
    /// silent waits for its lock: that node may be alive and still running
    /// the handler, which its own `callback_timeout` ends before the lock
    /// does. A task a worker holds (see `pull.rs`) is taken back only once
    /// its lease ran out, its attempt recorded as `expired`: the worker
    /// may settle it through any node. `now` is the node's clock: locks
    /// that ran out before it are taken back.
    pub(crate) async fn reclaim(
        &self,
        default_max: i64,
        now: i64,
    ) -> Result<Vec<Reclaimed>, Error> {
        let taken_back = format!(
            "ttw_tasks.state = 'running' \
             AND EXISTS (SELECT 1 FROM ttw_leases l WHERE {} AND l.owner_session = $4 \
             AND (ttw_tasks.locked_until < $2 \
             OR ((ttw_tasks.lock_epoch IS NULL \
             OR (ttw_tasks.lock_epoch <> {WORKER} AND ttw_tasks.lock_epoch < l.epoch)) \
             AND NOT EXISTS (SELECT 1 FROM ttw_nodes n WHERE n.session = ttw_tasks.locked_by))))",
            task_lane("$3")
        );
        let why = format!(
            "CASE WHEN ttw_tasks.lock_epoch = {WORKER} \
             THEN 'lease expired: worker ' || ttw_tasks.locked_by || ' did not settle its claim in time' \
             WHEN ttw_tasks.locked_until < $2 \
             THEN 'lock expired: the node delivering it stopped or lost its shard' \
             ELSE 'the node delivering it died; the shard''s new owner took it back' END"
        );
        let outcome =
            format!("CASE WHEN lock_epoch = {WORKER} THEN 'expired' ELSE 'interrupted' END");
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
                     SELECT id, claims, attempts, old_by, old_start, $2, {outcome}, NULL, last_error \
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
                     SELECT id, claims, attempts, locked_by, started_at, $2, {outcome}, NULL, {why} \
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
