//! What the store says about tasks: states, a task as kept
//! ([`TaskInfo`]) and the count of tasks in each state ([`StateCounts`]).

use std::time::SystemTime;

use crate::error::Error;

pub use crate::model::id::TaskId;

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum TaskState {
    /// Waiting for its `run_at` (or for a retry).
    Scheduled,
    /// Claimed by a node and being delivered.
    Running,
    /// Delivered and acknowledged; kept for the scheduler's retention, then
    /// deleted.
    Done,
    /// Failed on every allowed attempt; kept until redriven.
    Dead,
    /// Cancelled before it ran; kept for the retention, then deleted.
    Cancelled,
}

impl TaskState {
    /// The state's name in lower case, as the store, the `ttw` tool and
    /// the service's API write it.
    ///
    /// ```
    /// assert_eq!(ttw_durable::TaskState::Cancelled.as_str(), "cancelled");
    /// ```
    pub fn as_str(self) -> &'static str {
        self.as_sql()
    }

    /// The state as the `state` column holds it.
    pub(crate) fn as_sql(self) -> &'static str {
        match self {
            TaskState::Scheduled => "scheduled",
            TaskState::Running => "running",
            TaskState::Done => "done",
            TaskState::Dead => "dead",
            TaskState::Cancelled => "cancelled",
        }
    }

    /// Every state, in the order of a task's life.
    pub const ALL: [TaskState; 5] = [
        TaskState::Scheduled,
        TaskState::Running,
        TaskState::Done,
        TaskState::Dead,
        TaskState::Cancelled,
    ];

    /// Reads the `state` column. A value this build does not know (a
    /// newer version wrote it, or the row was edited by hand) is an error
    /// that names it ([`Error::is_corrupt`], also [`Error::is_database`]),
    /// never taken for another state.
    pub(crate) fn from_sql(s: &str) -> Result<TaskState, Error> {
        s.parse()
            .map_err(|_| Error::corrupt(format!("an unknown task state {s:?} in ttw_tasks")))
    }
}

/// The state's name, as [`TaskState::as_str`] gives it.
///
/// ```
/// assert_eq!(ttw_durable::TaskState::Dead.to_string(), "dead");
/// ```
impl std::fmt::Display for TaskState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A state by its name in lower case; anything else is a
/// [`ParseStateError`] that lists the five.
///
/// ```
/// use ttw_durable::TaskState;
/// assert_eq!("running".parse::<TaskState>().unwrap(), TaskState::Running);
/// let err = "Running".parse::<TaskState>().unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "\"Running\" is not a state (scheduled, running, done, dead, cancelled)"
/// );
/// ```
impl std::str::FromStr for TaskState {
    type Err = ParseStateError;

    fn from_str(s: &str) -> Result<TaskState, ParseStateError> {
        TaskState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| ParseStateError(s.to_string()))
    }
}

/// A name that is not a [`TaskState`]'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseStateError(String);

impl std::fmt::Display for ParseStateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} is not a state (scheduled, running, done, dead, cancelled)",
            self.0
        )
    }
}

impl std::error::Error for ParseStateError {}

/// A task as the store holds it, from [`Store::get`](crate::Store::get).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskInfo {
    /// The task's id.
    pub id: TaskId,
    /// Its state.
    pub state: TaskState,
    /// When it is (or was last) due.
    pub run_at: SystemTime,
    /// Delivery attempts started so far.
    pub attempts: u32,
    /// Its own attempt limit, if it was scheduled with one; otherwise the
    /// scheduler's applies.
    pub max_attempts: Option<u32>,
    /// The error of the last failed attempt.
    pub last_error: Option<String>,
    /// Its idempotency key.
    pub idempotency_key: Option<String>,
    /// The payload.
    pub payload: Vec<u8>,
    /// Its queue.
    pub queue: String,
    /// Its priority within its queue.
    pub priority: i16,
    /// Its partition key.
    pub partition_key: Option<String>,
    /// What it carries for its delivery beside its payload, if anything
    /// ([`Schedule::envelope`](crate::Schedule::envelope)).
    pub envelope: Option<crate::model::envelope::Envelope>,
    /// Its kind, for a typed job ([`JobArgs::KIND`](crate::JobArgs::KIND));
    /// `None` for an untyped task.
    pub kind: Option<String>,
    /// When it was scheduled.
    pub created_at: SystemTime,
    /// When its row last changed (a claim, an outcome, a reschedule).
    pub updated_at: SystemTime,
    /// When it finished (done, dead or cancelled), if it has.
    pub finished_at: Option<SystemTime>,
    /// While a worker holds it (a pull queue's claim,
    /// `Pulls::claim`): the worker's name.
    pub worker: Option<String>,
    /// While a worker holds it: when its lease runs out unless extended.
    pub lease_until: Option<SystemTime>,
}

/// How many tasks are in each state, from
/// [`Store::counts`](crate::Store::counts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StateCounts {
    /// Waiting for their time.
    pub scheduled: u64,
    /// Being delivered.
    pub running: u64,
    /// Delivered and acknowledged (within the retention).
    pub done: u64,
    /// Out of attempts.
    pub dead: u64,
    /// Cancelled (within the retention).
    pub cancelled: u64,
}

impl StateCounts {
    /// The count of tasks in `state`.
    ///
    /// ```
    /// use ttw_durable::{StateCounts, TaskState};
    ///
    /// let mut counts = StateCounts::default();
    /// counts.set(TaskState::Dead, 3);
    /// assert_eq!(counts.get(TaskState::Dead), 3);
    /// assert_eq!(counts.dead, 3);
    /// ```
    pub fn get(&self, state: TaskState) -> u64 {
        let mut copy = *self;
        *copy.slot(state)
    }

    /// Sets the count of tasks in `state`.
    pub fn set(&mut self, state: TaskState, n: u64) {
        *self.slot(state) = n;
    }

    /// The count of tasks in `state`, to change.
    pub(crate) fn slot(&mut self, state: TaskState) -> &mut u64 {
        match state {
            TaskState::Scheduled => &mut self.scheduled,
            TaskState::Running => &mut self.running,
            TaskState::Done => &mut self.done,
            TaskState::Dead => &mut self.dead,
            TaskState::Cancelled => &mut self.cancelled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_reads_back_as_itself() {
        for state in [
            TaskState::Scheduled,
            TaskState::Running,
            TaskState::Done,
            TaskState::Dead,
            TaskState::Cancelled,
        ] {
            assert_eq!(TaskState::from_sql(state.as_sql()).unwrap(), state);
        }
    }

    /// Regression: an unknown state was read as `Cancelled`, silently.
    #[test]
    fn an_unknown_state_is_an_error_naming_it() {
        let err = TaskState::from_sql("paused").unwrap_err();
        assert!(err.is_database());
        assert!(err.is_corrupt());
        assert!(err.to_string().contains("\"paused\""), "{err}");
    }
}
