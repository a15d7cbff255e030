//! What an operator does to many tasks at once, chosen by a [`TaskQuery`]:
//! count them ([`Store::count`]), cancel the scheduled ones
//! ([`Store::cancel_many`]), and run finished ones again, their due times
//! spread out ([`Store::redrive_many`]). Each goes a page of ids at a time,
//! each page one statement per task or one per group: a failure part-way
//! leaves what was done done, and running it again finishes the job.

use std::time::Duration;

use crate::client::admin::TaskQuery;
use crate::client::store::Store;
use crate::error::Error;
use crate::model::task::TaskState;
use crate::model::time::ms;
use crate::notify::Made;
use crate::sql::admin;
use crate::sql::tasks::{self, Which};

/// How many tasks of a [`Store::redrive_many`] share one due time at most.
pub const REDRIVE_GROUP: u64 = 500;

/// How many ids [`Store::cancel_many`] reads at a time.
const CANCEL_PAGE: u64 = 500;

/// Which finished tasks [`Store::redrive_many`] runs again, how many at
/// most, and over how long their due times are spread.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ttw_durable::Redrive;
///
/// // At most 10,000 dead tasks of "emails", due over the next ten minutes.
/// let redrive = Redrive::dead().queue("emails").limit(10_000).spread(Duration::from_secs(600));
/// # let _ = redrive;
/// ```
#[derive(Debug, Clone)]
pub struct Redrive {
    state: TaskState,
    matching: TaskQuery,
    limit: u64,
    spread: Duration,
}

impl Redrive {
    /// Dead tasks, at most 1,000, all due at once.
    pub fn dead() -> Redrive {
        Redrive {
            state: TaskState::Dead,
            matching: TaskQuery::new(),
            limit: 1000,
            spread: Duration::ZERO,
        }
    }

    /// Tasks in `state` instead: dead, cancelled or done. A scheduled or
    /// running task is refused by [`Store::redrive_many`].
    pub fn state(mut self, state: TaskState) -> Self {
        self.state = state;
        self
    }

    /// Only tasks of `queue`.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.matching = self.matching.queue(queue);
        self
    }

    /// Only tasks that `query` selects too: its queue, partition key,
    /// idempotency key, due and created times (not its state, page or
    /// limit; [`Redrive::state`] and [`Redrive::limit`] say those).
    ///
    /// ```
    /// use ttw_durable::{Redrive, TaskQuery};
    ///
    /// let redrive = Redrive::dead().matching(TaskQuery::new().partition_key("tenant-7"));
    /// # let _ = redrive;
    /// ```
    pub fn matching(mut self, query: TaskQuery) -> Self {
        self.matching = query;
        self
    }

    /// At most `n` tasks, the oldest ids first.
    pub fn limit(mut self, n: u64) -> Self {
        self.limit = n;
        self
    }

    /// Due times spread evenly from now to `spread` from now, in groups of
    /// at most [`REDRIVE_GROUP`] tasks, so that a large redrive never makes
    /// one large batch due at once.
    pub fn spread(mut self, spread: Duration) -> Self {
        self.spread = spread;
        self
    }
}

impl Store {
    /// How many tasks `query` selects (its page and limit aside).
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_queue`], [`Error::is_out_of_range`] for a time
    /// the store cannot hold, [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use ttw_durable::{Store, TaskQuery};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// store.schedule("a").partition_key("tenant-7").await?;
    /// store.schedule("b").partition_key("tenant-8").await?;
    /// assert_eq!(store.count(&TaskQuery::new().partition_key("tenant-7")).await?, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn count(&self, query: &TaskQuery) -> Result<u64, Error> {
        let n = admin::count(self.db(), query.filter(None)?).await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Cancels the scheduled tasks `query` selects, at most `max` of them,
    /// the oldest ids first, as [`Store::cancel`] does one. Returns how
    /// many were cancelled: one that a node claimed meanwhile is not.
    ///
    /// # Errors
    ///
    /// [`Error::is_config`] for a query of another state than scheduled,
    /// [`Error::is_invalid_queue`], [`Error::is_out_of_range`],
    /// [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ttw_durable::{Store, TaskQuery};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// for i in 0..3 {
    ///     store.schedule(format!("{i}")).partition_key("tenant-7").delay(Duration::from_secs(60)).await?;
    /// }
    /// let tenant = TaskQuery::new().partition_key("tenant-7");
    /// assert_eq!(store.cancel_many(&tenant, 2).await?, 2);
    /// assert_eq!(store.counts().await?.cancelled, 2);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn cancel_many(&self, query: &TaskQuery, max: u64) -> Result<u64, Error> {
        if !matches!(query.wanted_state(), None | Some(TaskState::Scheduled)) {
            return Err(Error::config(
                "only scheduled tasks can be cancelled: leave the state out, or ask for scheduled",
            ));
        }
        query.filter(None)?;
        let query = query.clone();
        self.to_completion(move |store| async move { store.cancel_here(&query, max).await })
            .await
    }

    /// [`cancel_many`](Self::cancel_many), checked, on this task.
    async fn cancel_here(&self, query: &TaskQuery, max: u64) -> Result<u64, Error> {
        let filter = query.filter(Some(TaskState::Scheduled))?;
        let (mut cancelled, mut seen, mut after) = (0, 0, 0);
        while seen < max {
            let ids = admin::ids(
                self.db(),
                admin::IdPage {
                    filter,
                    after,
                    take: (max - seen).min(CANCEL_PAGE),
                },
            )
            .await?;
            let Some(&last) = ids.last() else {
                break;
            };
            after = last;
            seen += ids.len() as u64;
            for id in ids {
                let now = self.clock().now_ms();
                if tasks::cancel(self.db(), Which::Id(id), now).await? {
                    cancelled += 1;
                }
            }
        }
        Ok(cancelled)
    }

    /// Runs finished tasks again: those in the state `redrive` names (dead
    /// by default), of its queue if it names one, at most its limit, oldest
    /// ids first. Each is scheduled with its attempts reset and its last
    /// error kept (until the next attempt), its due times spread from now
    /// over the redrive's span in groups of at most [`REDRIVE_GROUP`].
    /// Returns how many were redriven. Each group is one statement: a
    /// failure part-way leaves the groups before it redriven and the rest
    /// as they were, so running it again finishes the job.
    ///
    /// # Errors
    ///
    /// [`Error::is_config`] for a state that is not finished (scheduled,
    /// running), [`Error::is_invalid_queue`], [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ttw_durable::{Redrive, Store, TaskState};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// let id = store.schedule("x").delay(Duration::from_secs(60)).await?;
    /// store.cancel(id).await?;
    /// let redrive = Redrive::dead().state(TaskState::Cancelled).spread(Duration::from_secs(60));
    /// assert_eq!(store.redrive_many(&redrive).await?, 1);
    /// assert_eq!(store.get(id).await?.unwrap().state, TaskState::Scheduled);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn redrive_many(&self, redrive: &Redrive) -> Result<u64, Error> {
        if !matches!(
            redrive.state,
            TaskState::Dead | TaskState::Cancelled | TaskState::Done
        ) {
            return Err(Error::config(format!(
                "only finished tasks (dead, cancelled, done) can be redriven, not {:?}",
                redrive.state
            )));
        }
        redrive.matching.filter(None)?;
        let redrive = redrive.clone();
        self.to_completion(move |store| async move { store.redrive_here(&redrive).await })
            .await
    }

    /// [`redrive_many`](Self::redrive_many), checked, on this task.
    async fn redrive_here(&self, redrive: &Redrive) -> Result<u64, Error> {
        let filter = redrive.matching.filter(Some(redrive.state))?;
        let count = admin::count(self.db(), filter).await?;
        let total = u64::try_from(count).unwrap_or(0).min(redrive.limit);
        let start = self.clock().now_ms();
        let spread = ms(redrive.spread);
        let mut done: u64 = 0;
        let mut redriven: u64 = 0;
        let mut after: i64 = 0;
        while done < total {
            let take = (total - done).min(REDRIVE_GROUP);
            let ids = admin::ids(
                self.db(),
                admin::IdPage {
                    filter,
                    after,
                    take,
                },
            )
            .await?;
            let Some(&last) = ids.last() else {
                break;
            };
            after = last;
            // This group's place in the span: spread * done / total.
            let offset =
                i64::try_from(i128::from(spread) * i128::from(done) / i128::from(total.max(1)))
                    .unwrap_or(0);
            let at = start.saturating_add(offset);
            let changed = admin::redrive(
                self.db(),
                self.names(),
                admin::Redriving {
                    ids: &ids,
                    state: redrive.state,
                    at,
                },
            )
            .await?;
            done += ids.len() as u64;
            redriven += changed.len() as u64;
            self.notifier().committed(changed, Made::Moved);
        }
        Ok(redriven)
    }
}
