//! What the node's wheel holds: a task due at a time, in one of the node's
//! lanes, with what the node needs to order it against the others.

/// A scheduled task due at `run_at` (ms), in lane `lane` of this node (see
/// [`Lanes`](crate::model::lanes::Lanes)), with its priority within its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Due {
    pub(crate) id: i64,
    pub(crate) run_at: i64,
    pub(crate) lane: u32,
    pub(crate) priority: i16,
    /// Its partition key's hash (see
    /// [`key_hash`](crate::sql::announce::key_hash)): the tasks of a queue
    /// take turns by key on the node.
    pub(crate) key: u64,
}
