//! The client's side: a [`Store`](crate::Store) schedules, reads, cancels
//! and moves tasks, alone, in batches, through the caller's own connection,
//! by idempotency key; and what an operator reads and does across tasks.

pub(crate) mod admin;
pub(crate) mod batch;
pub(crate) mod bulk;
pub(crate) mod connection;
pub(crate) mod counts;
pub(crate) mod export;
pub(crate) mod flow;
pub(crate) mod grouped;
pub(crate) mod keys;
pub(crate) mod pull;
pub(crate) mod pull_state;
pub(crate) mod schedule;
pub(crate) mod store;
