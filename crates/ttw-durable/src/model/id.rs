//! The id of a task: what every other part of the model names a task by.

use std::fmt;

/// The id of a durable task, unique in its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(pub(crate) i64);

impl TaskId {
    /// A task id from its stored number (as kept by an application that
    /// recorded [`TaskId::get`]).
    pub fn new(id: i64) -> TaskId {
        TaskId(id)
    }

    /// The id as stored in the database.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
