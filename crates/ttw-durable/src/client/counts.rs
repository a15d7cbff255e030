//! Counting tasks: per state ([`Store::counts`]) and per queue and state
//! ([`Store::queue_counts`]), and per queue and state with a bound on what
//! is read ([`Store::bounded_queue_counts`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::client::store::Store;
use crate::error::Error;
use crate::model::task::{StateCounts, TaskState};
use crate::sql::admin;

impl Store {
    /// How many tasks are in each state, as `(scheduled, running, done,
    /// dead, cancelled)`.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    pub async fn counts(&self) -> Result<StateCounts, Error> {
        let rows = admin::state_counts(self.db()).await?;
        let mut counts = StateCounts::default();
        for (state, n) in rows {
            *counts.slot(TaskState::from_sql(&state)?) = u64::try_from(n).unwrap_or(0);
        }
        Ok(counts)
    }

    /// How many tasks each queue holds in each state, by queue name; a
    /// queue appears once it has a task. Tasks of a queue that no node
    /// serves wait in `scheduled`.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use ttw_durable::Store;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// store.schedule("a").queue("emails").await?;
    /// store.schedule("b").await?;
    /// let counts = store.queue_counts().await?;
    /// assert_eq!(counts["emails"].scheduled, 1);
    /// assert_eq!(counts["default"].scheduled, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn queue_counts(&self) -> Result<BTreeMap<String, StateCounts>, Error> {
        let rows = admin::queue_state_counts(self.db()).await?;
        let mut counts: BTreeMap<String, StateCounts> = BTreeMap::new();
        for (queue, state, n) in rows {
            *counts
                .entry(queue)
                .or_default()
                .slot(TaskState::from_sql(&state)?) = u64::try_from(n).unwrap_or(0);
        }
        Ok(counts)
    }

    /// Tasks per queue and state, read in a time that does not grow with
    /// the store: each pending state (scheduled, running, dead) of each
    /// queue counted up to `bound`, and the finished ones (done,
    /// cancelled) among the newest `bound` tasks of the history. A count
    /// that stopped there is in [`BoundedCounts::at_least`]: there are at
    /// least that many (a queue whose finished tasks are all older than
    /// the newest `bound` is absent). [`Store::queue_counts`] counts every
    /// task, in a time that grows with the tasks; a console of a large
    /// store shows these first and those when it has them.
    ///
    /// # Errors
    ///
    /// [`Error::is_config`] for a bound of 0, [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use ttw_durable::{Store, TaskState};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// for _ in 0..5 {
    ///     store.schedule("a").queue("emails").await?;
    /// }
    /// store.schedule("b").await?;
    /// let counts = store.bounded_queue_counts(3).await?;
    /// assert_eq!(counts.counts["emails"].scheduled, 3);
    /// assert!(counts.at_least.contains(&("emails".to_string(), TaskState::Scheduled)));
    /// assert_eq!(counts.counts["default"].scheduled, 1);
    /// assert!(!counts.is_capped("default", TaskState::Scheduled));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn bounded_queue_counts(&self, bound: u64) -> Result<BoundedCounts, Error> {
        let bound = i64::try_from(bound)
            .ok()
            .filter(|&b| b > 0)
            .ok_or_else(|| Error::config(format!("a bound of counts is 1 or more, not {bound}")))?;
        let mut out = BoundedCounts::default();
        let pending = admin::bounded_pending_counts(self.db(), bound).await?;
        let finished = admin::recent_finished_counts(self.db(), bound).await?;
        let history_full = finished.iter().map(|(_, _, n)| n).sum::<i64>() >= bound;
        for (queue, state, n) in pending {
            let state = TaskState::from_sql(&state)?;
            if n >= bound {
                out.at_least.insert((queue.clone(), state));
            }
            out.counts
                .entry(queue)
                .or_default()
                .set(state, u64::try_from(n).unwrap_or(0));
        }
        for (queue, state, n) in finished {
            let state = TaskState::from_sql(&state)?;
            if history_full {
                out.at_least.insert((queue.clone(), state));
            }
            out.counts
                .entry(queue)
                .or_default()
                .set(state, u64::try_from(n).unwrap_or(0));
        }
        if history_full {
            // A finished state a full window did not show may still be there.
            for (queue, _) in out.counts.iter() {
                for state in [TaskState::Done, TaskState::Cancelled] {
                    out.at_least.insert((queue.clone(), state));
                }
            }
        }
        Ok(out)
    }

    /// How many tasks each queue got done per second, by every node, over
    /// the last `window` (from the history, so finished tasks must be kept
    /// that long), reading at most [`MAX_THROUGHPUT_READ`] of them: when
    /// more finished within the window, the rate is over the span the
    /// newest of them cover ([`Throughput::over`]).
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ttw_durable::{Scheduler, Store};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// let scheduler = Scheduler::builder(store.clone())
    ///     .handle("emails", |_task| async { Ok::<_, String>(()) })
    ///     .start_queues()
    ///     .await?;
    /// for _ in 0..6 {
    ///     store.schedule("hi").queue("emails").await?;
    /// }
    /// while store.counts().await?.done < 6 {
    ///     tokio::time::sleep(Duration::from_millis(10)).await;
    /// }
    /// let recent = store.recent_throughput(Duration::from_secs(60)).await?;
    /// assert_eq!(recent.over, Duration::from_secs(60));
    /// assert!((recent.done_per_second["emails"] - 0.1).abs() < 1e-9);
    /// scheduler.shutdown().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn recent_throughput(&self, window: Duration) -> Result<Throughput, Error> {
        let now = self.clock().now_ms();
        let since = now.saturating_sub(i64::try_from(window.as_millis()).unwrap_or(i64::MAX));
        let limit = i64::try_from(MAX_THROUGHPUT_READ).unwrap_or(i64::MAX);
        let rows = admin::recent_done(self.db(), since, limit).await?;
        let read: i64 = rows.iter().map(|(_, n, _)| n).sum();
        let over = match rows.iter().map(|(_, _, first)| *first).min() {
            Some(first) if read >= limit => {
                Duration::from_millis(u64::try_from(now - first).unwrap_or(0).max(1))
            }
            _ => window,
        };
        let per_second = |n: i64| n as f64 / over.as_secs_f64().max(1e-3);
        Ok(Throughput {
            done_per_second: rows
                .into_iter()
                .map(|(q, n, _)| (q, per_second(n)))
                .collect(),
            over,
        })
    }

    /// Sets the `ttw_tasks{queue, state}` gauge of the installed
    /// [`metrics`] recorder from [`Store::queue_counts`], and returns the
    /// counts. One `GROUP BY` over the tasks: call it every few seconds,
    /// from one process (`ttw server` does, for `/metrics`), not per task. A
    /// queue this store published before and that has no task left now
    /// (its finished tasks swept by the retention, say) is set to zero in
    /// every state rather than left at its last counts.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use ttw_durable::Store;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// store.schedule("a").await?;
    /// let counts = store.publish_task_counts().await?;
    /// assert_eq!(counts["default"].scheduled, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn publish_task_counts(&self) -> Result<BTreeMap<String, StateCounts>, Error> {
        let counts = self.queue_counts().await?;
        self.publish(&counts);
        Ok(counts)
    }

    /// As [`publish_task_counts`](Self::publish_task_counts), from
    /// [`Store::bounded_queue_counts`]: each count stops at `bound`, so the
    /// call reads at most `bound` index entries per queue and state
    /// whatever the store holds (a few milliseconds with 10 million tasks),
    /// and a gauge at `bound` means at least that many. For an exporter
    /// read on every scrape.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use ttw_durable::Store;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// store.schedule("a").await?;
    /// store.schedule("b").await?;
    /// let counts = store.publish_bounded_task_counts(1).await?;
    /// assert_eq!(counts.counts["default"].scheduled, 1);
    /// assert!(counts.is_capped("default", ttw_durable::TaskState::Scheduled));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn publish_bounded_task_counts(&self, bound: u64) -> Result<BoundedCounts, Error> {
        let counts = self.bounded_queue_counts(bound).await?;
        self.publish(&counts.counts);
        Ok(counts)
    }

    /// Sets the gauges of `counts`, and zero for the queues published
    /// before that have no task left.
    fn publish(&self, counts: &BTreeMap<String, StateCounts>) {
        let mut published = self.published_queues();
        // A queue published before with no task left now (its last finished
        // tasks swept, say) reads zero rather than its last counts.
        for gone in published.iter().filter(|q| !counts.contains_key(*q)) {
            publish_queue(gone, &StateCounts::default());
        }
        for (queue, c) in counts {
            publish_queue(queue, c);
        }
        *published = counts.keys().cloned().collect();
    }
}

/// The most finished tasks [`Store::recent_throughput`] reads.
pub const MAX_THROUGHPUT_READ: u64 = 100_000;

/// Tasks done per second, per queue, by every node: from
/// [`Store::recent_throughput`].
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Throughput {
    /// By queue; a queue that got none done is absent.
    pub done_per_second: BTreeMap<String, f64>,
    /// The span the rates are over: the window asked for, or less when
    /// more than [`MAX_THROUGHPUT_READ`] tasks finished in it.
    pub over: Duration,
}

/// Counts per queue and state that stop at a bound, from
/// [`Store::bounded_queue_counts`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BoundedCounts {
    /// By queue: each count at most the bound.
    pub counts: BTreeMap<String, StateCounts>,
    /// The (queue, state) counts that stopped at the bound: there are at
    /// least that many.
    pub at_least: BTreeSet<(String, TaskState)>,
}

impl BoundedCounts {
    /// Whether the count of `queue` in `state` stopped at the bound.
    pub fn is_capped(&self, queue: &str, state: TaskState) -> bool {
        self.at_least.contains(&(queue.to_string(), state))
    }
}

/// Sets the `ttw_tasks` gauges of `queue`.
fn publish_queue(queue: &str, c: &StateCounts) {
    for (state, n) in [
        (TaskState::Scheduled, c.scheduled),
        (TaskState::Running, c.running),
        (TaskState::Done, c.done),
        (TaskState::Dead, c.dead),
        (TaskState::Cancelled, c.cancelled),
    ] {
        crate::telemetry::task_gauge(queue, state.as_sql(), n);
    }
}
