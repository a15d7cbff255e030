//! A node's lanes. A lane is one queue this node serves crossed with one
//! shard: leases are held per lane, so each queue's shards are shared among
//! the nodes that serve it, and a queue no node serves has no lease held and
//! its tasks wait.
//!
//! Lanes are numbered `queue index × shards + shard`, the queue index being
//! the queue's place in the node's sorted list of queues: a dense number the
//! node's shard table and wheel use, never written to the database.

use std::sync::Arc;

use crate::error::Error;
use crate::model::queue::check_queue;

/// The lanes of one node: the queues it serves (sorted, each once) crossed
/// with the store's shards.
#[derive(Debug)]
pub(crate) struct Lanes {
    queues: Vec<Arc<str>>,
    shards: u32,
}

impl Lanes {
    /// The lanes of `queues` (checked, sorted, without repeats) on a store
    /// of `shards` shards.
    pub(crate) fn new(mut queues: Vec<String>, shards: u32) -> Result<Lanes, Error> {
        for queue in &queues {
            check_queue(queue)?;
        }
        queues.sort_unstable();
        queues.dedup();
        if queues.is_empty() {
            return Err(Error::config("a scheduler must serve at least one queue"));
        }
        Ok(Lanes {
            queues: queues.into_iter().map(Arc::from).collect(),
            shards,
        })
    }

    /// How many lanes there are.
    pub(crate) fn count(&self) -> usize {
        self.queues.len() * self.shards as usize
    }

    /// The queues served, sorted.
    pub(crate) fn queues(&self) -> &[Arc<str>] {
        &self.queues
    }

    /// The position of `queue` in [`queues`](Self::queues), if served.
    pub(crate) fn queue_index(&self, queue: &str) -> Option<usize> {
        self.queues.binary_search_by(|q| (**q).cmp(queue)).ok()
    }

    /// The lane of task `id` in queue `queue`, if this node serves it.
    pub(crate) fn lane(&self, queue: &str, id: i64) -> Option<u32> {
        let shard = id.rem_euclid(i64::from(self.shards)) as u32;
        Some(self.lane_of(self.queue_index(queue)?, shard))
    }

    /// The lane of shard `shard` of the queue at `index`.
    pub(crate) fn lane_of(&self, index: usize, shard: u32) -> u32 {
        index as u32 * self.shards + shard
    }

    /// The index of the queue of `lane`.
    pub(crate) fn index_of(&self, lane: u32) -> usize {
        (lane / self.shards) as usize
    }

    /// The queue of `lane`.
    pub(crate) fn queue_of(&self, lane: u32) -> &Arc<str> {
        &self.queues[self.index_of(lane)]
    }

    /// The shard of `lane`.
    pub(crate) fn shard_of(&self, lane: u32) -> u32 {
        lane % self.shards
    }

    /// The lanes of the queue at `index`.
    pub(crate) fn lanes_of(&self, index: usize) -> std::ops::Range<u32> {
        self.lane_of(index, 0)..self.lane_of(index + 1, 0)
    }

    /// The queues served, comma-separated, as the membership row holds them.
    pub(crate) fn joined(&self) -> String {
        self.queues.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_number_queues_by_shard() {
        let lanes = Lanes::new(vec!["b".into(), "a".into(), "b".into()], 4).unwrap();
        assert_eq!(lanes.count(), 8);
        assert_eq!(lanes.joined(), "a,b");
        assert_eq!(lanes.lane("a", 6), Some(2));
        assert_eq!(lanes.lane("b", 6), Some(6));
        assert_eq!(lanes.lane("c", 6), None);
        assert_eq!(&**lanes.queue_of(6), "b");
        assert_eq!(lanes.shard_of(6), 2);
        assert_eq!(lanes.lanes_of(1), 4..8);
        assert!(Lanes::new(Vec::new(), 4).unwrap_err().is_config());
        assert!(Lanes::new(vec!["".into()], 4)
            .unwrap_err()
            .is_invalid_queue());
    }
}
