//! What a store keeps for its pull queues, apart from the store itself
//! (which holds it): the wakes of the claims waiting on each queue, the
//! workers it recorded as seen, and the writer of its acks' groups.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{watch, Notify};

use crate::error::Error;
use crate::sql::claims::pull::{self, Settled};

/// Who may settle a task of a queue: the caller's check of its name.
pub(crate) type Allowed = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// What wakes the claims waiting on a pull queue, one per store: a node
/// whose wheel fires a task of the queue (or hears that another node's
/// did) wakes them, and they claim again.
#[derive(Debug)]
pub(crate) struct PullWakes {
    queues: Mutex<HashMap<String, Arc<Notify>>>,
    /// When this process last recorded each (queue, worker) as seen.
    seen: Mutex<HashMap<(String, String), i64>>,
    /// True once waiting claims are to answer at once (a graceful stop).
    pub(crate) closing: watch::Sender<bool>,
}

impl Default for PullWakes {
    fn default() -> Self {
        PullWakes {
            queues: Mutex::default(),
            seen: Mutex::default(),
            closing: watch::Sender::new(false),
        }
    }
}

/// How often one process records a worker as seen.
const SEEN_EVERY_MS: i64 = 1_000;

/// The most waiting claims one wake looks again.
const MAX_WAKES: usize = 1_024;

impl PullWakes {
    pub(crate) fn of(&self, queue: &str) -> Arc<Notify> {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(notify) = queues.get(queue) {
            return notify.clone();
        }
        let notify = Arc::new(Notify::new());
        queues.insert(queue.to_string(), notify.clone());
        notify
    }

    /// `n` tasks of `queue` fell due (or made room): as many of its
    /// waiting claims look again, the longest waiting first, not every one
    /// (a thousand idle polls do not all query for one task). A claim
    /// dropped once woken passes its wake on to the next.
    pub(crate) fn wake(&self, queue: &str, n: usize) {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(notify) = queues.get(queue) {
            for _ in 0..n.min(MAX_WAKES) {
                notify.notify_one();
            }
        }
    }

    /// Whether `worker`'s claim on `queue` at `now` is to be recorded as
    /// seen: once a second per process, not at each claim.
    pub(crate) fn record_seen(&self, queue: &str, worker: &str, now: i64) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() > 10_000 {
            seen.clear();
        }
        let key = (queue.to_string(), worker.to_string());
        match seen.get(&key) {
            Some(&at) if now.saturating_sub(at) < SEEN_EVERY_MS => false,
            _ => {
                seen.insert(key, now);
                true
            }
        }
    }

    /// Some announcements may have been missed: every waiting claim looks
    /// again.
    pub(crate) fn wake_all(&self) {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        for notify in queues.values() {
            notify.notify_waiters();
        }
    }
}

/// One ack handed to the store's acks' writer.
pub(crate) struct AckItem {
    pub(crate) id: i64,
    pub(crate) claim: i64,
    pub(crate) now: i64,
    pub(crate) answer: Option<String>,
    pub(crate) allowed: Allowed,
}

/// The most acks one group writes.
pub(crate) const MAX_ACK_GROUP: usize = 512;

/// How a group of acks is written: one transaction, one commit for many
/// workers' acks (see [`group`](crate::group)).
pub(crate) struct Acks {
    pub(crate) db: crate::sql::db::Db,
    pub(crate) names: crate::sql::names::Names,
}

type AckAnswer = Result<(Settled<String>, Vec<crate::sql::announce::Announced>), Error>;

impl crate::group::WriteGroup for Acks {
    type Item = AckItem;
    type Answer = AckAnswer;

    /// The group at the latest of its items' times (a lease that ran out
    /// while an ack waited is stale). The callback tasks it wrote go with
    /// the first answer. On a failure the commit may have happened with
    /// its answer lost: every ack of the group hears of it.
    async fn write(&self, group: Vec<AckItem>) -> Vec<AckAnswer> {
        let now = group.iter().map(|a| a.now).max().unwrap_or(0);
        let acks: Vec<pull::Acking<'_>> = group
            .iter()
            .map(|a| pull::Acking {
                id: a.id,
                claim: a.claim,
                answer: a.answer.as_deref(),
                allowed: &*a.allowed,
            })
            .collect();
        match pull::ack(&self.db, &self.names, &acks, now).await {
            Ok((settled, told)) => {
                let mut told = Some(told);
                settled
                    .into_iter()
                    .map(|s| Ok((s, told.take().unwrap_or_default())))
                    .collect()
            }
            Err(err) => {
                let said = err.to_string();
                let mut answers = Vec::with_capacity(group.len());
                answers.push(Err(err));
                answers.extend((1..group.len()).map(|_| Err(Error::group_failed(&said))));
                answers
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::PullWakes;

    /// Regression: every task that fell due woke every claim waiting on
    /// its queue (`notify_waiters`), so a thousand idle long polls ran a
    /// thousand claims for one task. A wake for `n` tasks wakes `n`.
    #[test]
    fn a_wake_for_one_task_wakes_one_waiting_claim() {
        let wakes = PullWakes::default();
        let notify = wakes.of("q");
        let mut waiting: Vec<_> = (0..3).map(|_| Box::pin(notify.notified())).collect();
        for claim in &mut waiting {
            claim.as_mut().enable();
        }
        // The claims a wake answered leave the list.
        let woken = |waiting: &mut Vec<std::pin::Pin<Box<tokio::sync::futures::Notified<'_>>>>| {
            let before = waiting.len();
            waiting.retain_mut(|claim| claim.as_mut().now_or_never().is_none());
            before - waiting.len()
        };
        wakes.wake("q", 1);
        assert_eq!(woken(&mut waiting), 1);
        wakes.wake("q", 5);
        assert_eq!(woken(&mut waiting), 2, "the other two");
        wakes.wake("other", 1);
    }
}
