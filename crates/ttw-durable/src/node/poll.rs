//! The catch-up poll: what a notification missed (and, on SQLite between
//! processes, the only way to hear of it).

use crate::error::Error;
use crate::model::due::Due;
use crate::sql::claims::{Claims, Since};

/// The catch-up poll's place: the database clock reading it looks back
/// from. Change stamps and the reading are both the database's clock, taken
/// while each statement runs, so neither a long wait for SQLite's write lock
/// nor a node's clock running behind hides a change from the poll; the
/// slack only has to cover the moment between a change's stamp and its
/// commit.
#[derive(Debug)]
pub(crate) struct Poll {
    since: Option<i64>,
    slack: i64,
}

impl Poll {
    /// A poll run every `every_ms` milliseconds. Its slack is two periods
    /// and a second; the first poll looks back one slack from its own
    /// start, which covers the time since the window was first loaded.
    pub(crate) fn new(every_ms: i64) -> Poll {
        Poll {
            since: None,
            slack: every_ms.saturating_mul(2).saturating_add(1000),
        }
    }

    /// Forgets where the last poll looked: the next looks back one slack
    /// from its own start, as the first does. For a poll resting while
    /// notifications bring every change; a window load follows when they
    /// stop (see [`Listener::next`]).
    pub(crate) fn restart(&mut self) {
        self.since = None;
    }

    /// One poll: the scheduled tasks of this session's shards due before
    /// `horizon` that changed since the last poll looked.
    pub(crate) async fn poll(&mut self, claims: &Claims, horizon: i64) -> Result<Vec<Due>, Error> {
        let changed = claims
            .changed_since(Since {
                horizon,
                since: self.since,
                slack: self.slack,
            })
            .await?;
        self.since = Some(changed.db_now - self.slack);
        Ok(changed.due)
    }
}
