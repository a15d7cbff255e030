//! `GET /v1/counts` on a store of any size: counts that stop at
//! [`BOUND`] answer at once, and where one stopped there, the last full
//! count (a `GROUP BY` over every task, run in the background and no more
//! often than its own duration allows) gives the figure if it is larger.
//! A store with fewer tasks than that is counted exactly on every call.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use ttw_durable::{BoundedCounts, StateCounts, Store, TaskState};

use super::super::config::Token;
use super::super::refusal::Answer;
use super::super::wire::{self, CountsView, QueueCountsView};
use super::{allow_queue, Api};

/// Where a count stops: a page of counts reads at most this many index
/// entries per queue and pending state, and this many finished tasks.
pub(crate) const BOUND: u64 = 10_000;

/// The span of each queue's `done_per_s`.
const THROUGHPUT_WINDOW: Duration = Duration::from_secs(60);

/// The shortest and the longest time between two full counts; between
/// them, twenty times what the last one took.
const REFRESH: (Duration, Duration) = (Duration::from_secs(10), Duration::from_secs(1800));

/// A count of every task, and when it was taken.
#[derive(Debug, Clone)]
struct Full {
    counts: BTreeMap<String, StateCounts>,
    at: SystemTime,
    taken: Instant,
    took: Duration,
}

/// The last full count, and whether one is running.
#[derive(Debug, Default)]
pub(crate) struct CountCache {
    full: Mutex<Option<Full>>,
    running: AtomicBool,
}

impl CountCache {
    /// The last full count, if any.
    fn last(&self) -> Option<Full> {
        self.full.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Starts a full count in the background unless one is running or the
    /// last is recent for its cost. Spawned: a client that hangs up does
    /// not stop it.
    fn refresh(self: &Arc<Self>, store: &Store) {
        let due = match self.last() {
            None => true,
            Some(full) => {
                let every = (full.took * 20).clamp(REFRESH.0, REFRESH.1);
                full.taken.elapsed() >= every
            }
        };
        if !due || self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let (cache, store) = (self.clone(), store.clone());
        tokio::spawn(async move {
            let (at, taken) = (SystemTime::now(), Instant::now());
            match store.queue_counts().await {
                Ok(counts) => {
                    let full = Full {
                        counts,
                        at,
                        taken,
                        took: taken.elapsed(),
                    };
                    *cache.full.lock().unwrap_or_else(|p| p.into_inner()) = Some(full);
                }
                Err(err) => tracing::warn!("a full count of the tasks failed: {err}"),
            }
            cache.running.store(false, Ordering::Release);
        });
    }
}

/// The five states, in the order of the document.
const STATES: [TaskState; 5] = [
    TaskState::Scheduled,
    TaskState::Running,
    TaskState::Done,
    TaskState::Dead,
    TaskState::Cancelled,
];

/// Tasks per queue (of the queues the token may use) and state.
pub(crate) async fn counts(api: &Api, token: &Token) -> Answer<QueueCountsView> {
    let oldest = api.store.oldest_due().await?;
    let recent = api.store.recent_throughput(THROUGHPUT_WINDOW).await?;
    let bounded = api.store.bounded_queue_counts(BOUND).await?;
    let full = if bounded.at_least.is_empty() {
        None
    } else {
        api.counts.refresh(&api.store);
        api.counts.last()
    };
    let (queues, used_full) = merge(bounded, full.as_ref().map(|f| &f.counts));
    let queues = queues
        .into_iter()
        .filter(|(queue, _)| allow_queue(token, queue).is_ok())
        .map(|(queue, mut view)| {
            view.late_ms = oldest.get(&queue).map(|&due| {
                SystemTime::now()
                    .duration_since(due)
                    .unwrap_or_default()
                    .as_millis() as u64
            });
            view.done_per_s = recent.done_per_second.get(&queue).copied().unwrap_or(0.0);
            (queue, view)
        })
        .collect();
    Ok(QueueCountsView {
        queues,
        counted_at: full.filter(|_| used_full).map(|f| wire::rfc3339(f.at)),
    })
}

/// The bounded counts, each that stopped at the bound raised to the full
/// count's figure if that is larger and marked estimated; queues only the
/// full count knows (their finished tasks older than the bound's window)
/// added with their finished counts. Whether a full figure was used.
fn merge(
    bounded: BoundedCounts,
    full: Option<&BTreeMap<String, StateCounts>>,
) -> (BTreeMap<String, CountsView>, bool) {
    let mut used = false;
    let mut out = BTreeMap::new();
    for (queue, counts) in &bounded.counts {
        let mut merged = *counts;
        let mut estimated = Vec::new();
        for state in STATES {
            if !bounded.is_capped(queue, state) {
                continue;
            }
            let known = full.and_then(|f| f.get(queue)).map(|c| c.get(state));
            if let Some(n) = known.filter(|&n| n > merged.get(state)) {
                merged.set(state, n);
                used = true;
            }
            estimated.push(state.as_str().to_string());
        }
        let mut view = CountsView::from(merged);
        view.estimated = estimated;
        out.insert(queue.clone(), view);
    }
    let history_capped = bounded
        .at_least
        .iter()
        .any(|(_, state)| *state == TaskState::Done);
    for (queue, counts) in full.into_iter().flatten() {
        if out.contains_key(queue) || !history_capped {
            continue;
        }
        let mut merged = StateCounts::default();
        let mut estimated = Vec::new();
        for state in [TaskState::Done, TaskState::Cancelled] {
            merged.set(state, counts.get(state));
            estimated.push(state.as_str().to_string());
        }
        used = true;
        let mut view = CountsView::from(merged);
        view.estimated = estimated;
        out.insert(queue.clone(), view);
    }
    (out, used)
}

#[cfg(test)]
mod tests;
