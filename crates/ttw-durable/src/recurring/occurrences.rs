//! A node's pass over the recurring schedules of the shards it holds:
//! each occurrence due soon becomes a task, keyed by the schedule and the
//! occurrence's time, in the transaction that moves the schedule past it,
//! fenced on what was read; occurrences missed in a downtime go as the
//! schedule's catch-up policy says.

use super::rule::Rule;
use super::{occurrence_key, CatchUp, StoredRow, COLUMNS, MAX_PER_PASS};
use crate::client::store::Store;
use crate::error::Error;
use crate::model::time::{ms, now_ms};
use crate::notify::{Announced, Made, ANNOUNCED};
use crate::sql::db::{placeholders, with_pool, Urgency};
use crate::sql::history::finished_twins;

impl Store {
    /// One pass of a node over the schedules of the shards it holds
    /// (`session`): makes tasks of every occurrence due before `now +
    /// ahead`, applying the catch-up policy to those missed. Returns the
    /// earliest next occurrence not yet made a task, among the schedules
    /// not paused: when to come back.
    pub(crate) async fn make_occurrences(
        &self,
        session: &str,
        ahead: i64,
    ) -> Result<Option<i64>, Error> {
        let sql = format!(
            "SELECT {COLUMNS} FROM ttw_recurring r WHERE paused = 0 AND EXISTS \
             (SELECT 1 FROM ttw_leases l WHERE l.queue = r.queue AND l.shard = r.shard \
             AND l.owner_session = $1)"
        );
        let rows = with_pool!(self.db(), pool => {
            let mut out = Vec::new();
            for row in sqlx::query(&sql).bind(session).fetch_all(pool).await? {
                out.push(StoredRow::read(&row)?);
            }
            out
        });
        let mut earliest: Option<i64> = None;
        for row in rows {
            let now = now_ms();
            let next = if row.next_at < now.saturating_add(ahead) {
                match row.definition().check() {
                    Ok(rule) => self.make_tasks(&row, &rule, now, ahead).await?,
                    Err(err) => {
                        tracing::warn!(schedule = %row.info.name, %err, "a stored schedule no longer parses; skipped");
                        continue;
                    }
                }
            } else {
                row.next_at
            };
            earliest = Some(earliest.map_or(next, |e| e.min(next)));
        }
        Ok(earliest)
    }

    /// Makes tasks of one schedule's occurrences due before `now + ahead`,
    /// moving its `next_at` past them in the same transaction, fenced on
    /// the `next_at` and `version` read. Returns its `next_at` after.
    async fn make_tasks(
        &self,
        row: &StoredRow,
        rule: &Rule,
        now: i64,
        ahead: i64,
    ) -> Result<i64, Error> {
        let info = &row.info;
        let cutoff = now.saturating_sub(ms(info.missed_after));
        let (missed, mut next) = rule.missed(row.next_at, cutoff)?;
        let mut times: Vec<i64> = match info.catch_up {
            CatchUp::Skip => Vec::new(),
            CatchUp::Last => missed.last().copied().into_iter().collect(),
            CatchUp::All => missed,
        };
        let horizon = now.saturating_add(ahead);
        let mut upcoming = 0;
        while next < horizon && upcoming < MAX_PER_PASS {
            times.push(next);
            next = rule.after(next)?;
            upcoming += 1;
        }
        if times.is_empty() && next == row.next_at {
            return Ok(next);
        }
        let tasks = self.tasks_table();
        let history = self.history_table();
        let clock = self.db().clock_sql();
        let values = (0..times.len())
            .map(|i| {
                let base = 7 + 2 * i;
                format!("(${base}, $1, ${}, $2, $3, $4, $5, $6, {clock})", base + 1)
            })
            .collect::<Vec<_>>()
            .join(", ");
        let insert = self.notifier().announcing(&format!(
            "INSERT INTO {tasks} (run_at, payload, idempotency_key, max_attempts, recurring, queue, priority, \
             created_at, updated_at) \
             VALUES {values} ON CONFLICT (idempotency_key) DO NOTHING RETURNING {ANNOUNCED}"
        ));
        let fence = "UPDATE ttw_recurring SET next_at = $1, updated_at = $2 \
                     WHERE name = $3 AND next_at = $4 AND version = $5 AND paused = 0";
        let turn = self.db().write_turn(Urgency::Ordinary).await;
        let created = with_pool!(self.db(), pool => {
            let mut tx = pool.begin().await?;
            let mut created = Vec::new();
            if !times.is_empty() {
                let mut query = sqlx::query(&insert)
                    .bind(&info.payload)
                    .bind(info.max_attempts.map(i64::from))
                    .bind(&info.name)
                    .bind(&info.queue)
                    .bind(i64::from(info.priority))
                    .bind(now);
                for &t in &times {
                    query = query.bind(t).bind(occurrence_key(&info.name, t));
                }
                // Read to its end (see the notes of `db`).
                for r in query.fetch_all(&mut *tx).await? {
                    created.push(Announced::read(&r)?);
                }
                // An occurrence that ran already holds its key from the
                // history (see `sql::history`): the new task goes.
                if !created.is_empty() {
                    let ids = placeholders(1, created.len());
                    let twins = finished_twins(tasks, history, &format!("t.id IN ({ids})"));
                    let mut query = sqlx::query_as::<_, (i64, i64)>(&twins);
                    for task in &created {
                        query = query.bind(task.id);
                    }
                    let gone: Vec<i64> =
                        query.fetch_all(&mut *tx).await?.into_iter().map(|(new, _)| new).collect();
                    if !gone.is_empty() {
                        let sql = format!("DELETE FROM {tasks} WHERE id IN ({})", placeholders(1, gone.len()));
                        let mut query = sqlx::query(&sql);
                        for id in &gone {
                            query = query.bind(id);
                        }
                        query.execute(&mut *tx).await?;
                        created.retain(|task| !gone.contains(&task.id));
                    }
                }
            }
            let moved = sqlx::query(fence)
                .bind(next)
                .bind(now)
                .bind(&info.name)
                .bind(row.next_at)
                .bind(row.version)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if moved == 1 {
                tx.commit().await?;
                Some(created)
            } else {
                // Another node, or an operator, changed the schedule since
                // it was read: write nothing; the next pass reads it again.
                tx.rollback().await?;
                None
            }
        });
        drop(turn);
        match created {
            Some(created) => {
                self.notifier().committed(created, Made::Created);
                Ok(next)
            }
            None => Ok(row.next_at),
        }
    }
}
