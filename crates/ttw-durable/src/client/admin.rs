//! What an operator reads and does across many tasks: tasks listed by
//! state, queue and due time, a page at a time ([`Store::list`]); the
//! nodes and the leases they hold ([`Store::nodes`]); how late each queue
//! is ([`Store::oldest_due`]); what comes due soon ([`Store::due_timeline`]).
//! Bulk actions are in `client/bulk.rs`. The `ttw` tool, the
//! service and its console are built on these.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::client::store::Store;
use crate::error::Error;
use crate::model::queue::check_queue;
use crate::model::task::{TaskInfo, TaskState};
use crate::model::time::{from_ms, ms, to_ms};
use crate::sql::admin::{self, Cursor, Filter, Page};

/// The largest page [`Store::list`] returns.
pub const MAX_PAGE: u32 = 1000;

/// Which tasks [`Store::list`] returns: filters, and a page after a task id.
/// Pages go in id order; pass the last id of a page to [`TaskQuery::after`]
/// for the next.
///
/// # Examples
///
/// ```
/// use ttw_durable::{Store, TaskQuery, TaskState};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ttw_durable::Error> {
/// let store = Store::sqlite_in_memory().await?;
/// for i in 0..5 {
///     store.schedule(format!("mail {i}")).queue("emails").await?;
/// }
/// let query = TaskQuery::new().state(TaskState::Scheduled).queue("emails").limit(2);
/// let first = store.list(&query).await?;
/// assert_eq!(first.len(), 2);
/// let next = store.list(&query.clone().after(first[1].id)).await?;
/// assert_eq!(next.len(), 2);
/// assert!(next[0].id > first[1].id);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct TaskQuery {
    state: Option<TaskState>,
    queue: Option<String>,
    partition_key: Option<String>,
    kind: Option<String>,
    idempotency_key: Option<String>,
    due_from: Option<SystemTime>,
    due_before: Option<SystemTime>,
    created_from: Option<SystemTime>,
    created_before: Option<SystemTime>,
    after: Option<i64>,
    after_due: Option<i64>,
    limit: u32,
    newest_first: bool,
    by_due: bool,
}

impl Default for TaskQuery {
    fn default() -> Self {
        TaskQuery::new()
    }
}

impl TaskQuery {
    /// All tasks, the first 100.
    pub fn new() -> TaskQuery {
        TaskQuery {
            state: None,
            queue: None,
            partition_key: None,
            kind: None,
            idempotency_key: None,
            due_from: None,
            due_before: None,
            created_from: None,
            created_before: None,
            after: None,
            after_due: None,
            limit: 100,
            newest_first: false,
            by_due: false,
        }
    }

    /// Only tasks in `state`.
    pub fn state(mut self, state: TaskState) -> Self {
        self.state = Some(state);
        self
    }

    /// Only tasks of `queue`.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Only tasks of partition key `key`.
    pub fn partition_key(mut self, key: impl Into<String>) -> Self {
        self.partition_key = Some(key.into());
        self
    }

    /// Only typed jobs of kind `kind` ([`JobArgs::KIND`](crate::JobArgs::KIND)),
    /// read on an index of the typed tasks alone.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Only the task of idempotency key `key` (a key names at most one
    /// pending task, and may name finished ones too).
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Only tasks scheduled (created) at `from` or later.
    pub fn created_from(mut self, from: SystemTime) -> Self {
        self.created_from = Some(from);
        self
    }

    /// Only tasks scheduled (created) before `before`.
    pub fn created_before(mut self, before: SystemTime) -> Self {
        self.created_before = Some(before);
        self
    }

    /// Pages from the newest id down: [`after`](Self::after) then means
    /// the ids below the one given.
    pub fn newest_first(mut self) -> Self {
        self.newest_first = true;
        self
    }

    /// Pages in due order, the soonest first (the latest first with
    /// [`newest_first`](Self::newest_first)), tasks due at the same
    /// millisecond by id; the next page starts
    /// [`after_task`](Self::after_task) the last of this one. With the
    /// state scheduled, running or dead, each page is a keyset read of the
    /// due index, however many tasks the filter selects.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ttw_durable::{Store, TaskQuery, TaskState};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// for minutes in [30, 10, 20, 10] {
    ///     store.schedule("x").delay(Duration::from_secs(60 * minutes)).await?;
    /// }
    /// let query = TaskQuery::new().state(TaskState::Scheduled).by_due().limit(3);
    /// let first = store.list(&query).await?;
    /// assert!(first[0].run_at <= first[1].run_at && first[1].run_at <= first[2].run_at);
    /// let next = store.list(&query.clone().after_task(&first[2])).await?;
    /// assert_eq!(next.len(), 1);
    /// assert!(next[0].run_at >= first[2].run_at);
    /// # Ok(())
    /// # }
    /// ```
    pub fn by_due(mut self) -> Self {
        self.by_due = true;
        self
    }

    /// The page after the one `task` ended, in either order: its id, and
    /// its due time for [`by_due`](Self::by_due).
    pub fn after_task(mut self, task: &TaskInfo) -> Self {
        self.after = Some(task.id.get());
        self.after_due = to_ms(task.run_at).ok();
        self
    }

    /// The page after the task due at `run_at` with id `id`, for
    /// [`by_due`](Self::by_due) (a cursor kept as these two values).
    pub fn after_due(mut self, run_at: SystemTime, id: crate::model::task::TaskId) -> Self {
        self.after = Some(id.get());
        self.after_due = to_ms(run_at).ok();
        self
    }

    /// Only tasks due at `from` or later.
    pub fn due_from(mut self, from: SystemTime) -> Self {
        self.due_from = Some(from);
        self
    }

    /// Only tasks due before `before`.
    pub fn due_before(mut self, before: SystemTime) -> Self {
        self.due_before = Some(before);
        self
    }

    /// Only tasks with ids above `id` (below it, newest first): the page
    /// after the one `id` ended.
    pub fn after(mut self, id: crate::model::task::TaskId) -> Self {
        self.after = Some(id.get());
        self
    }

    /// At most `n` tasks (1 to [`MAX_PAGE`]; [`Store::list`] refuses
    /// others).
    pub fn limit(mut self, n: u32) -> Self {
        self.limit = n;
        self
    }

    /// The filter of the statements, checked (a queue's name, times the
    /// store can hold), with `state` in place of the query's own if given.
    pub(crate) fn filter(&self, state: Option<TaskState>) -> Result<Filter<'_>, Error> {
        if let Some(queue) = &self.queue {
            check_queue(queue)?;
        }
        let time = |t: Option<SystemTime>| t.map(to_ms).transpose();
        Ok(Filter {
            state: state.or(self.state),
            queue: self.queue.as_deref(),
            partition_key: self.partition_key.as_deref(),
            kind: self.kind.as_deref(),
            idempotency_key: self.idempotency_key.as_deref(),
            due_from: time(self.due_from)?,
            due_before: time(self.due_before)?,
            created_from: time(self.created_from)?,
            created_before: time(self.created_before)?,
        })
    }

    /// The state it asks for, if any.
    pub(crate) fn wanted_state(&self) -> Option<TaskState> {
        self.state
    }
}

/// A node as the store knows it, from [`Store::nodes`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeInfo {
    /// The node's id.
    pub node_id: String,
    /// The queues it serves.
    pub queues: Vec<String>,
    /// Its last heartbeat, by the database's clock.
    pub heartbeat_at: SystemTime,
    /// It is shutting down, giving its shards back.
    pub leaving: bool,
    /// The (queue, shard) leases its session holds.
    pub leases: u32,
    /// When its leases run out unless it heartbeats again: its last
    /// heartbeat plus its lease TTL, by the database's clock. `None` if it
    /// holds none, or it is of a version that did not record its TTL.
    pub lease_expires_at: Option<SystemTime>,
    /// Its leases are still live by the database's clock (the expiry is
    /// ahead); a node that died keeps its row until another node's
    /// heartbeat clears it, with this `false`.
    pub live: bool,
    /// The shards it has taken over from another owner (a node that died
    /// or left) since it joined, as its heartbeats recorded them.
    pub takeovers: u64,
}

/// What comes due soon, from [`Store::due_timeline`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DueTimeline {
    /// Scheduled tasks whose time has passed already.
    pub overdue: u64,
    /// The span of each bucket.
    pub bucket: Duration,
    /// Scheduled tasks due in each bucket, the first starting now.
    pub counts: Vec<u64>,
}

impl Store {
    /// The newest schema migration applied to the database (the store
    /// applies what is missing when it opens): 13 for this version of the
    /// crate.
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
    /// assert_eq!(store.schema_version().await?, 16);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn schema_version(&self) -> Result<i64, Error> {
        Ok(admin::schema_version(self.db()).await?.unwrap_or(0))
    }

    /// Tasks that match `query`, in id order (or due order), at most its
    /// limit.
    ///
    /// # Errors
    ///
    /// [`Error::is_config`] for a limit of 0 or over [`MAX_PAGE`], or a
    /// page in due order after an id alone,
    /// [`Error::is_invalid_queue`], [`Error::is_out_of_range`] for a due
    /// time the store cannot hold, [`Error::is_database`].
    pub async fn list(&self, query: &TaskQuery) -> Result<Vec<TaskInfo>, Error> {
        if query.limit == 0 || query.limit > MAX_PAGE {
            return Err(Error::config(format!(
                "a page holds 1 to {MAX_PAGE} tasks, not {}",
                query.limit
            )));
        }
        let after = match (query.by_due, query.after, query.after_due) {
            (_, None, _) => None,
            (false, Some(id), _) => Some(Cursor::Id(id)),
            (true, Some(id), Some(at)) => Some(Cursor::Due(at, id)),
            (true, Some(_), None) => {
                return Err(Error::config(
                    "a page in due order starts after a task (after_task or after_due), \
                     not after an id alone",
                ))
            }
        };
        let page = Page {
            filter: query.filter(None)?,
            after,
            limit: query.limit,
            newest_first: query.newest_first,
            by_due: query.by_due,
        };
        admin::page(self.db(), page).await
    }

    /// The nodes that have joined and not left (or not yet been cleared
    /// after dying), by id, with the leases each holds.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use ttw_durable::{Scheduler, Store};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// let scheduler = Scheduler::builder(store.clone())
    ///     .node_id("web-1")
    ///     .start(|_task| async { Ok::<_, String>(()) })
    ///     .await?;
    /// let nodes = store.nodes().await?;
    /// assert_eq!(nodes[0].node_id, "web-1");
    /// assert_eq!(nodes[0].queues, ["default"]);
    /// scheduler.shutdown().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn nodes(&self) -> Result<Vec<NodeInfo>, Error> {
        let nodes = admin::nodes(self.db())
            .await?
            .into_iter()
            .map(|row| {
                let leases = u32::try_from(row.leases).unwrap_or(u32::MAX);
                NodeInfo {
                    queues: row
                        .queues
                        .split(',')
                        .filter(|q| !q.is_empty())
                        .map(str::to_string)
                        .collect(),
                    heartbeat_at: from_ms(row.heartbeat_at),
                    leaving: row.leaving,
                    leases,
                    lease_expires_at: row.expires.filter(|_| leases > 0).map(from_ms),
                    live: row.expires.is_some_and(|at| at > row.now),
                    takeovers: u64::try_from(row.takeovers).unwrap_or(0),
                    node_id: row.node_id,
                }
            })
            .collect();
        Ok(nodes)
    }

    /// For each queue with a scheduled task whose time has passed, the
    /// oldest such `run_at`: how far behind the queue is (nothing served
    /// it, or its nodes cannot keep up). A queue that is on time is absent.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use ttw_durable::Store;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    /// store.schedule("late").queue("reports").at(an_hour_ago).await?;
    /// store.schedule("later").delay(Duration::from_secs(60)).await?;
    /// let oldest = store.oldest_due().await?;
    /// assert_eq!(oldest.keys().collect::<Vec<_>>(), ["reports"]);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn oldest_due(&self) -> Result<BTreeMap<String, SystemTime>, Error> {
        let rows = admin::oldest_due(self.db(), self.clock().now_ms()).await?;
        Ok(rows.into_iter().map(|(q, at)| (q, from_ms(at))).collect())
    }

    /// Scheduled tasks by when they come due: those overdue, then a count
    /// per `bucket` for `buckets` buckets from now.
    ///
    /// # Errors
    ///
    /// [`Error::is_config`] for a zero bucket or more than 10,000 buckets,
    /// [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ttw_durable::Store;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// store.schedule("soon").delay(Duration::from_secs(90)).await?;
    /// let timeline = store.due_timeline(Duration::from_secs(60), 60).await?;
    /// assert_eq!(timeline.counts[1], 1);
    /// assert_eq!(timeline.counts.iter().sum::<u64>(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn due_timeline(&self, bucket: Duration, buckets: u32) -> Result<DueTimeline, Error> {
        let width = ms(bucket);
        if width == 0 || buckets > 10_000 {
            return Err(Error::config(
                "a due timeline takes a bucket of at least 1 ms and at most 10,000 buckets",
            ));
        }
        let now = self.clock().now_ms();
        let end = now.saturating_add(width.saturating_mul(i64::from(buckets)));
        let rows = admin::due_buckets(self.db(), admin::Buckets { now, width, end }).await?;
        let mut timeline = DueTimeline {
            overdue: 0,
            bucket,
            counts: vec![0; buckets as usize],
        };
        for (b, n) in rows {
            let n = u64::try_from(n).unwrap_or(0);
            match usize::try_from(b) {
                Ok(b) if b < timeline.counts.len() => timeline.counts[b] += n,
                Ok(_) => {}
                Err(_) => timeline.overdue += n,
            }
        }
        Ok(timeline)
    }
}
