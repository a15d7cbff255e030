//! What the task system is about, with no database in it: a task and its
//! state, a task to schedule, and the rule for queue names.

pub(crate) mod attempt;
pub(crate) mod attempts;
pub(crate) mod backoff;
pub(crate) mod clock;
pub(crate) mod due;
pub(crate) mod envelope;
pub(crate) mod failure;
pub(crate) mod flow;
pub(crate) mod id;
pub(crate) mod lanes;
pub(crate) mod lateness;
pub(crate) mod limits;
pub(crate) mod new_task;
pub(crate) mod queue;
pub(crate) mod task;
pub(crate) mod time;
