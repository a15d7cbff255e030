//! What the claim statements read and answer: a task due, the rows of the
//! window loads and the reclaim, and the outcomes of a claim, a lookup and
//! a failure.

use std::sync::Arc;

use crate::model::attempt::{Attempt, Task, Tells};
use crate::model::attempts::Receipt;
use crate::model::envelope::Envelope;
use crate::model::task::TaskState;
use crate::model::time::from_ms;
use crate::sql::db::clamp_u32;

use crate::model::due::Due;

/// A catch-up poll's parameters: the tasks due before `horizon` whose
/// change stamp is at or after `since` (or, on the first poll, `slack`
/// before the database's clock).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Since {
    pub(crate) horizon: i64,
    pub(crate) since: Option<i64>,
    pub(crate) slack: i64,
}

/// A claim's parameters: the fired tasks it claims (in id order), the
/// time it claims them at, and the lock it takes until.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Claiming<'a> {
    pub(crate) fired: &'a [Due],
    pub(crate) now: i64,
    pub(crate) locked_until: i64,
}

/// The columns a [`Due`] is read from.
pub(super) const DUE_COLUMNS: &str = "id, run_at, queue, priority, partition_key";

/// A row of [`DUE_COLUMNS`].
#[derive(Debug, sqlx::FromRow)]
pub(super) struct DueRow {
    pub(super) id: i64,
    pub(super) run_at: i64,
    pub(super) queue: String,
    pub(super) priority: i64,
    pub(super) partition_key: Option<String>,
}

/// A row of a catch-up poll: the database's clock, and a task changed
/// since the last poll if there is one (a left join keeps the clock).
#[derive(Debug, sqlx::FromRow)]
pub(super) struct ChangedRow {
    pub(super) db_now: i64,
    pub(super) id: Option<i64>,
    pub(super) run_at: Option<i64>,
    pub(super) queue: Option<String>,
    pub(super) priority: Option<i64>,
    pub(super) partition_key: Option<String>,
}

impl ChangedRow {
    /// The task changed, if the row holds one.
    pub(super) fn task(self) -> Option<DueRow> {
        Some(DueRow {
            id: self.id?,
            run_at: self.run_at?,
            queue: self.queue?,
            priority: self.priority?,
            partition_key: self.partition_key,
        })
    }
}

/// A row of a reclaim: the task taken back, and the state it went to.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct ReclaimedRow {
    #[sqlx(flatten)]
    pub(super) task: DueRow,
    pub(super) state: String,
}

/// What a catch-up poll read.
#[derive(Debug)]
pub(crate) struct Changes {
    /// The database's clock as the statement ran.
    pub(crate) db_now: i64,
    pub(crate) due: Vec<Due>,
}

/// One attempt to record as succeeded: the task and the claim it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Success {
    pub(crate) id: i64,
    pub(crate) claim: i64,
}

/// A success to record: the attempt, and what its target said of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finished {
    pub(crate) success: Success,
    pub(crate) receipt: Receipt,
    /// The task has a `callback` to tell (see `sql::callbacks`).
    pub(crate) tell: bool,
}

impl From<Success> for Finished {
    /// A success with nothing more to say (a handler's), and no callback.
    fn from(success: Success) -> Finished {
        Finished {
            success,
            receipt: Receipt::none(),
            tell: false,
        }
    }
}

/// A task claimed for delivery: what the claim statement returned.
#[derive(Debug, Clone)]
pub(crate) struct Claimed {
    pub(crate) attempt: Attempt,
    pub(crate) run_at: i64,
    pub(crate) payload: Vec<u8>,
    pub(crate) idempotency_key: Option<String>,
    /// Its [`Envelope`](crate::Envelope), encoded, if it has one.
    pub(crate) envelope: Option<String>,
    /// Its kind, if it is a typed job.
    pub(crate) kind: Option<String>,
}

impl Claimed {
    /// The task as its handler gets it, in `queue`.
    pub(crate) fn into_task(self, queue: Arc<str>) -> Task {
        // Written only by this crate, after `Envelope::check`: a text
        // that does not read was edited by hand, and the task is
        // delivered as if it had none, said in the log.
        let envelope = self
            .envelope
            .and_then(|text| match Envelope::decode(&text) {
                Ok(envelope) => Some(Box::new(envelope)),
                Err(err) => {
                    tracing::error!(task = self.attempt.id, %err, "delivered without its envelope");
                    None
                }
            });
        Task {
            attempt: Attempt {
                tells: Tells::of(envelope.as_deref()),
                ..self.attempt
            },
            run_at: from_ms(self.run_at),
            payload: self.payload,
            idempotency_key: self.idempotency_key,
            queue,
            envelope,
            kind: self.kind,
        }
    }
}

/// A fired task the claim did not take, as it is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unclaimed {
    pub(crate) id: i64,
    pub(crate) state: TaskState,
    pub(crate) run_at: i64,
    /// Whether this session holds the task's shard.
    pub(crate) held: bool,
    /// Whether its queue is paused or limited (see [`uncontrolled`]): left
    /// to the limited claim.
    pub(crate) controlled: bool,
}

/// A running task the reclaim took back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reclaimed {
    /// The index of its queue among the node's queues.
    pub(crate) queue: usize,
    /// Out of attempts: dead rather than scheduled again.
    pub(crate) dead: bool,
    /// The task, due again (`None` when dead).
    pub(crate) due: Option<Due>,
}

/// What a failure outcome did to the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failed {
    /// Scheduled again at this time (ms).
    Retry(i64),
    /// Out of attempts.
    Dead,
}

/// One failed attempt to record, with its time and default limit (see
/// [`Claims::fail`](super::Claims::fail), the conformance cases' form).
#[cfg(test)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttemptFailed<'a> {
    /// The attempt's error, kept as the task's last.
    pub(crate) error: &'a str,
    /// The answer's status, if the target reported one.
    pub(crate) status: Option<u16>,
    /// When to try again, if it may.
    pub(crate) retry_at: i64,
    /// The attempt limit of a task (and its queue) without one of its own.
    pub(crate) default_max: i64,
    /// Dead at once, whatever its attempts (a permanent failure).
    pub(crate) dead_now: bool,
    /// The node's clock (ms).
    pub(crate) now: i64,
}

/// A failed attempt to record with others (see
/// [`Claims::fail_many`](super::Claims::fail_many)); the time and the
/// default attempt limit are the group's.
#[derive(Debug, Clone)]
pub(crate) struct Failing {
    /// The task.
    pub(crate) id: i64,
    /// The claim count the attempt holds it under (its fence).
    pub(crate) claim: i64,
    /// The task has a `failure_callback` to tell if it dies.
    pub(crate) tell_dead: bool,
    /// The attempt's error, kept as the task's last (and, bounded, as the
    /// attempt's detail).
    pub(crate) error: Box<str>,
    /// The answer's status, if the target reported one.
    pub(crate) status: Option<u16>,
    /// When to try again, if it may.
    pub(crate) retry_at: i64,
    /// Dead at once, whatever its attempts (a permanent failure).
    pub(crate) dead_now: bool,
}

/// A row [`Claims::fail_many`](super::Claims::fail_many)'s update returned: the
/// attempt it ended and what became of the task. (PostgreSQL records the
/// attempt in the same statement, and reads only the task's state.)
#[derive(Debug, sqlx::FromRow)]
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(super) struct FailedRow {
    pub(super) id: i64,
    pub(super) claims: i64,
    pub(super) attempts: i64,
    pub(super) started_at: Option<i64>,
    pub(super) state: String,
    pub(super) run_at: i64,
}

/// A row a claim statement returned: a task it took.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ClaimedRow {
    id: i64,
    run_at: i64,
    attempts: i64,
    claims: i64,
    payload: Vec<u8>,
    idempotency_key: Option<String>,
    envelope: Option<String>,
    kind: Option<String>,
}

/// The [`Claimed`] tasks of the rows a claim statement returned, for the
/// `fired` tasks (in id order) it was given.
pub(crate) fn claimed(rows: Vec<ClaimedRow>, fired: &[Due]) -> Vec<Claimed> {
    rows.into_iter()
        .filter_map(|row| {
            let at = fired.binary_search_by_key(&row.id, |due| due.id).ok()?;
            Some(Claimed {
                attempt: Attempt {
                    id: row.id,
                    number: clamp_u32(row.attempts),
                    claim: row.claims,
                    lane: fired[at].lane,
                    priority: fired[at].priority,
                    key: fired[at].key,
                    tells: Tells::default(),
                },
                run_at: row.run_at,
                payload: row.payload,
                idempotency_key: row.idempotency_key,
                envelope: row.envelope,
                kind: row.kind,
            })
        })
        .collect()
}

/// A row of [`Claims::why_unclaimed`](super::Claims::why_unclaimed).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct UnclaimedRow {
    id: i64,
    state: String,
    run_at: i64,
    held: i32,
    controlled: i32,
}

impl TryFrom<UnclaimedRow> for Unclaimed {
    type Error = crate::error::Error;

    fn try_from(row: UnclaimedRow) -> Result<Unclaimed, Self::Error> {
        Ok(Unclaimed {
            id: row.id,
            state: TaskState::from_sql(&row.state)?,
            run_at: row.run_at,
            held: row.held == 1,
            controlled: row.controlled == 1,
        })
    }
}
