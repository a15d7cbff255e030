//! The catch-up poll: what a notification missed (and, on SQLite between
//! processes, the only way to hear of it).

use std::collections::HashSet;

use crate::error::Error;
use crate::sql::claims::{Claims, Due};

/// The catch-up poll's place: the database clock reading it looks back
/// from. Change stamps and the reading are both the database's clock, taken
/// while each statement runs, so neither a long wait for SQLite's write lock
/// nor a node's clock running behind hides a change from the poll; the
/// slack only has to cover the moment between a change's stamp and its
/// commit.
///
/// The slack (three periods) means a poll reads again what the two before
/// it read. What a poll armed is not armed again by the next while its
/// time is the same: a batch of 10,000 tasks scheduled ahead was put into
/// the wheel again by three polls in a row, and on SQLite those
/// re-arms held up due tasks by 12-42 ms about once a second.
#[derive(Debug)]
pub(crate) struct Poll {
    since: Option<i64>,
    slack: i64,
    /// (id, run_at) of what the last poll armed.
    last: HashSet<(i64, i64)>,
    /// (id, run_at) of what this poll armed.
    now: HashSet<(i64, i64)>,
}

impl Poll {
    /// A poll run every `every_ms` milliseconds. Its slack is two periods
    /// and a second; the first poll looks back one slack from its own
    /// start, which covers the time since the window was first loaded.
    pub(crate) fn new(every_ms: i64) -> Poll {
        Poll {
            since: None,
            slack: every_ms.saturating_mul(2).saturating_add(1000),
            last: HashSet::new(),
            now: HashSet::new(),
        }
    }

    /// Forgets where the last poll looked, and what it armed: the next
    /// looks back one slack from its own start, as the first does, and arms
    /// all it finds. For a poll resting while notifications bring every
    /// change; a window load follows when they stop (see
    /// [`Listener::next`]).
    pub(crate) fn restart(&mut self) {
        self.since = None;
        self.last.clear();
        self.now.clear();
    }

    /// One poll: the scheduled tasks of this session's shards due before
    /// `horizon` that changed since the last poll looked, less those the
    /// last poll armed at the same time (see [`Poll::armed`]).
    pub(crate) async fn poll(&mut self, claims: &Claims, horizon: i64) -> Result<Vec<Due>, Error> {
        let changed = claims
            .changed_since(horizon, self.since, self.slack)
            .await?;
        self.since = Some(changed.db_now - self.slack);
        Ok(self.fresh(changed.due))
    }

    /// Of `due`, what the last poll did not arm; what it did and this one
    /// found again still counts as armed for the next.
    fn fresh(&mut self, due: Vec<Due>) -> Vec<Due> {
        self.last = std::mem::take(&mut self.now);
        let mut fresh = Vec::with_capacity(due.len());
        for d in due {
            if self.last.contains(&(d.id, d.run_at)) {
                self.now.insert((d.id, d.run_at));
            } else {
                fresh.push(d);
            }
        }
        fresh
    }

    /// Records that this poll armed `due`.
    pub(crate) fn armed(&mut self, due: Due) {
        self.now.insert((due.id, due.run_at));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(id: i64, run_at: i64) -> Due {
        Due {
            id,
            run_at,
            lane: 0,
            priority: 0,
        }
    }

    /// What a poll armed is not handed out again by the next polls that
    /// read it within the slack; a task moved to another time, one the
    /// poll found but did not arm, and everything after a restart are.
    #[test]
    fn a_poll_hands_out_only_what_it_did_not_arm_already() {
        let mut poll = Poll::new(1000);
        let first = poll.fresh(vec![due(1, 10), due(2, 20), due(3, 30)]);
        assert_eq!(first, vec![due(1, 10), due(2, 20), due(3, 30)]);
        // Task 3 was outside the node's lanes: not armed.
        poll.armed(due(1, 10));
        poll.armed(due(2, 20));
        // Read again: 1 as it was, 2 moved to a later time, 3 again, 4 new.
        let second = poll.fresh(vec![due(1, 10), due(2, 25), due(3, 30), due(4, 40)]);
        assert_eq!(second, vec![due(2, 25), due(3, 30), due(4, 40)]);
        for d in &second {
            poll.armed(*d);
        }
        // A third read of the same: nothing new; 1 is still remembered.
        assert!(poll
            .fresh(vec![due(1, 10), due(2, 25), due(3, 30), due(4, 40)])
            .is_empty());
        assert!(poll.fresh(vec![due(1, 10)]).is_empty());
        // Once a poll no longer reads it, it is forgotten.
        assert!(poll.fresh(vec![]).is_empty());
        assert_eq!(poll.fresh(vec![due(1, 10)]), vec![due(1, 10)]);
        poll.armed(due(1, 10));
        poll.restart();
        assert_eq!(poll.fresh(vec![due(1, 10)]), vec![due(1, 10)]);
    }
}
