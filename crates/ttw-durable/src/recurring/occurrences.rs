//! A node's pass over the recurring schedules of the shards it holds:
//! each occurrence due soon becomes a task, keyed by the schedule and the
//! occurrence's time, in the transaction that moves the schedule past it,
//! fenced on what was read; occurrences missed in a downtime go as the
//! schedule's catch-up policy says.

use super::rule::Rule;
use super::{occurrence_key, CatchUp, StoredRow, MAX_PER_PASS};
use crate::client::store::Store;
use crate::error::Error;
use crate::model::time::ms;
use crate::notify::Made;
use crate::sql::recurring::{self as sql, Advance};
use crate::sql::tasks::TaskParams;

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
        let rows = sql::held(self.db(), session)
            .await?
            .into_iter()
            .map(StoredRow::from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let mut earliest: Option<i64> = None;
        for row in rows {
            let now = self.clock().now_ms();
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
        let keys: Vec<String> = times
            .iter()
            .map(|&t| occurrence_key(&info.name, t))
            .collect();
        let params: Vec<TaskParams<'_>> = times
            .iter()
            .zip(&keys)
            .map(|(&run_at, key)| TaskParams {
                run_at,
                payload: &info.payload,
                idempotency_key: Some(key),
                max_attempts: info.max_attempts.map(i64::from),
                recurring: Some(&info.name),
                queue: &info.queue,
                priority: i64::from(info.priority),
                partition_key: None,
                envelope: None,
                kind: info.kind.as_deref(),
            })
            .collect();
        let pass = Advance {
            name: &info.name,
            tasks: &params,
            next_at: next,
            read_next_at: row.next_at,
            read_version: row.version,
        };
        // `None`: another node, or an operator, changed the schedule since
        // it was read; nothing was written, and the next pass reads it again.
        let created = sql::advance(self.db(), self.names(), pass, now).await?;
        match created {
            Some(created) => {
                self.notifier().committed(created, Made::Created);
                Ok(next)
            }
            None => Ok(row.next_at),
        }
    }
}
