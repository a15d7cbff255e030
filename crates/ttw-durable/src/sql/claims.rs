//! The statements a scheduler runs on tasks, on one [`Claims`], a file a
//! duty: the window loads (`window.rs`), the fenced claim (`claim.rs`, and
//! `limited.rs` under flow control), the fenced outcomes (`outcome.rs`),
//! the reclaim of tasks whose delivery ended without an outcome and the
//! retention sweep (`reclaim.rs`). The fragments they share are in
//! `fence.rs`, the rows they read and answer in `rows.rs`, their two
//! macros in `macros.rs`.

use std::sync::Arc;

use crate::error::Error;
#[cfg(test)]
use crate::model::attempt::Attempt;
use crate::model::attempts::bounded_str;
use crate::model::due::Due;
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
mod claim;
mod fence;
mod limited;
mod outcome;
pub(crate) mod pull;
mod reclaim;
mod rows;
mod window;

use fence::{checked, fenced, in_held_shard, retry_or_dead, task_lane, uncontrolled, UNLOCK};
pub(crate) use limited::Wait;
#[cfg(test)]
pub(crate) use rows::AttemptFailed;
use rows::{
    claimed, ChangedRow, ClaimedRow, DueRow, FailedRow, ReclaimedRow, UnclaimedRow, DUE_COLUMNS,
};
pub(crate) use rows::{
    Changes, Claimed, Claiming, Failed, Failing, Finished, Reclaimed, Since, Success, Unclaimed,
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
}

#[cfg(test)]
mod tests;
