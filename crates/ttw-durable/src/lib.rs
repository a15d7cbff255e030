//! Durable delayed tasks on the `tokio-timing-wheel` timer: tasks live in
//! SQLite (the embedded default) or PostgreSQL (many processes), the next
//! window of them waits in a [`TimingWheel`](tokio_timing_wheel::TimingWheel),
//! and each fires at its time, at least once, with a clear record.
//!
//! ```
//! use std::time::Duration;
//! use tokio::sync::mpsc;
//! use ttw_durable::{Scheduler, Store, TaskState};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ttw_durable::Error> {
//! // Store::sqlite("tasks.db") for a file; in memory for this example.
//! let store = Store::sqlite_in_memory().await?;
//! let (done, mut delivered) = mpsc::unbounded_channel();
//! let scheduler = Scheduler::builder(store.clone())
//!     .start(move |task| {
//!         let done = done.clone();
//!         async move {
//!             // Delivery is at least once: deduplicate by id or key.
//!             done.send((task.id(), task.idempotency_key().map(String::from))).ok();
//!             Ok::<_, String>(())
//!         }
//!     })
//!     .await?;
//!
//! let id = store
//!     .schedule(b"cancel unpaid order 42".to_vec())
//!     .delay(Duration::from_millis(100))
//!     .idempotency_key("cancel-order-42")
//!     .await?;
//! assert_eq!(delivered.recv().await.unwrap(), (id, Some("cancel-order-42".into())));
//!
//! scheduler.shutdown().await?;
//! assert_eq!(store.get(id).await?.unwrap().state, TaskState::Done);
//! # Ok(())
//! # }
//! ```
//!
//! # How it works
//!
//! - **Store**: one table of tasks (`ttw_tasks`), created by embedded
//!   migrations. A task has a `run_at`, a payload of at most [`MAX_PAYLOAD`]
//!   bytes, an optional idempotency key (unique: scheduling the same key
//!   again returns the first task's id and creates nothing), and an attempt
//!   count. Times are milliseconds since the Unix epoch, by the scheduling
//!   process's clock.
//! - **Queues**: every task belongs to a named queue ([`DEFAULT_QUEUE`]
//!   unless [`Schedule::queue`] says otherwise) and has a priority. A
//!   scheduler serves the queues it has handlers for
//!   ([`SchedulerBuilder::handle`]); leases are held per queue and shard,
//!   so each queue's shards are shared among the nodes that serve it, and
//!   the tasks of a queue no node serves wait. Due tasks wait for room
//!   under `max_concurrency` and the queue's own limit unclaimed, and are
//!   claimed lowest priority number first.
//! - **Window**: each [`Scheduler`] loads the scheduled tasks of its shards
//!   due within the next `window` (default 60 s) into its wheel, and
//!   reloads every half window. A task scheduled inside the loaded window
//!   enters the wheel at once: in-process directly; from other processes on
//!   PostgreSQL by `NOTIFY`, which the scheduling statement sends itself (so
//!   it goes out if and only if the task commits); on SQLite by a catch-up
//!   poll (every second by default). On PostgreSQL the poll runs only while
//!   the scheduler's `LISTEN` connection is down; a connection that opens
//!   or is lost reloads the window, so no change is missed in between. The
//!   poll compares change stamps written by the database's own clock while
//!   each statement runs (on SQLite, after it has the write lock), so
//!   neither a long wait for the lock nor a node's clock running behind
//!   hides a change from it. Tasks due in years cost no memory until their
//!   window comes.
//! - **Writes on SQLite**: SQLite has one writer at a time. A process's
//!   writes take turns in the process rather than sleeping in SQLite's busy
//!   handler, and claims and heartbeats go ahead of schedules and outcomes
//!   waiting, so tasks falling due during a burst of schedules are claimed
//!   within milliseconds (see BENCHMARKS.md). The WAL is checkpointed by
//!   the store on a connection of its own every 100 ms while writes go on,
//!   never inside one of those writes' commits (SQLite's automatic
//!   checkpoints are off); under steady writes, once the WAL holds 32 MiB,
//!   one checkpoint runs for a few milliseconds in a write turn of its own
//!   so that the WAL starts over instead of growing.
//! - **Claim**: when the wheel fires, one `UPDATE ... WHERE id IN (...) AND
//!   state = 'scheduled' AND run_at <= now AND <this node holds the shard's
//!   lease> RETURNING ...` moves the batch to running, counts the attempt,
//!   and stamps the node, the lease epoch and a lock deadline. There is no
//!   read-then-write window in which two nodes could both take a task.
//! - **Delivery**: to a handler ([`SchedulerBuilder::start`]) run under
//!   `callback_timeout` and `max_concurrency`, or on a [`Deliveries`] stream
//!   ([`SchedulerBuilder::start_stream`]) whose consumer calls
//!   [`Delivery::ack`] or [`Delivery::nack`]. A handler error, panic or
//!   timeout, a delivery dropped or not settled in time: each counts as a
//!   failed attempt.
//! - **Beyond the process**: a queue bound to a [`Target`] with
//!   [`SchedulerBuilder::deliver`] goes to another process: a signed HTTP
//!   webhook (`Webhook`, cargo feature `webhook`) or a NATS JetStream
//!   subject (`JetStream`, feature `nats`), under the same claim, fence,
//!   retries and lock as a handler. See [`targets`].
//! - **Outcomes**: success marks the task done (deleted after `retention`,
//!   default 24 h); failure schedules a retry after a jittered exponential
//!   [`Backoff`] until `max_attempts` (default 5), then marks it dead with its
//!   last error; [`Store::redrive`] schedules a dead task again. Every
//!   outcome is written under the same fence as the claim.
//!
//! # Delivery is at least once
//!
//! A task is never delivered before its `run_at`, and a task accepted by
//! [`Store::schedule`] is delivered even if every process dies: on restart
//! (or on another node) its shard's owner loads it again. But a process that
//! dies after a handler started and before the outcome was written, or
//! whose lease was taken while it delivered, leaves a running task that is
//! delivered again: at once when the shard's next owner takes it and the
//! old session is proven dead (its node id started again, or on Linux its
//! process on the same machine is gone), otherwise after the task's lock
//! deadline (`callback_timeout + lock_grace`), by which time a node that
//! was only silent has cut its own handler off, so two deliveries of a task
//! never overlap. A node that stays alive but cannot write
//! an outcome leaves its task to be taken back after the lock deadline
//! (`callback_timeout + lock_grace`). So a task can be delivered more than
//! once; exactly-once effects are the consumer's to make, with [`Task::id`]
//! or [`Task::idempotency_key`] and its own records.
//!
//! # Shards and nodes
//!
//! Tasks belong to a fixed number of logical shards (`id % shards`, default
//! 256, set when the schema is created). Each shard of each queue has a
//! lease row; a scheduler is a node that heartbeats (one small write, which
//! keeps all its leases), holds the leases of its fair share of each queue
//! it serves (shared among the nodes serving that queue), and serves only
//! those. One scheduler alone holds them all. A dead node's shards are free
//! after `lease_ttl`, or at once where its death can be proven: an earlier
//! session of the same node id, or (on Linux) a process on the same machine
//! that is gone. See the README's "Running many nodes" for the failure
//! model and the recovery times.
//!
//! # Features
//!
//! - `sqlite` and `postgres` (both on by default): the backends. A service
//!   on one of them can leave the other out, `default-features = false,
//!   features = ["sqlite"]`, and compiles neither its driver nor its
//!   statements; at least one is needed.
//! - `webhook`: `Webhook`, deliveries by signed HTTP.
//! - `nats`: `JetStream`, deliveries to NATS JetStream.
//! - `test-faults`: fault hooks for this workspace's own tests, not part
//!   of the API.
//!
//! # Limits
//!
//! - Payloads up to [`MAX_PAYLOAD`] bytes; times from the Unix epoch to
//!   [`MAX_RUN_AT`] after it. Anything else is an error, never a panic.
//! - A full disk (or [`StoreBuilder::sqlite_max_size`]) refuses writes with
//!   [`Error::is_disk_full`]; nothing acknowledged is lost. A claim that
//!   cannot be written delivers nothing, an outcome that cannot be written
//!   leaves its task to be delivered again after its lock deadline, and the
//!   scheduler resumes by itself once space returns.
//! - Heartbeats are stamped and judged by the database's clock, so node
//!   clocks play no part in lease takeovers. `run_at` and lock deadlines
//!   are the nodes' clocks: keep them in sync (NTP). Skew cannot let two
//!   nodes both record an outcome for one attempt, since the fence is
//!   checked in the database.
#![forbid(unsafe_code)]
// The crate's own unit tests and doc examples make their stores with
// `sqlite_in_memory`, and with one backend some `let ... else` on the
// backend's pool cannot fail.
#![cfg_attr(test, allow(irrefutable_let_patterns))]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]
#![doc(test(no_crate_inject, attr(deny(warnings, rust_2018_idioms))))]

#[cfg(not(any(feature = "sqlite", feature = "postgres")))]
compile_error!(
    "ttw-durable needs a backend: enable its feature `sqlite`, `postgres` or both (the default)"
);

#[cfg(all(test, not(feature = "sqlite")))]
compile_error!(
    "ttw-durable's unit tests open in-memory SQLite stores: run them with the feature `sqlite`"
);

mod client;
#[cfg(test)]
mod conformance;
mod error;
mod group;
mod jobs;
mod model;
mod node;
mod notify;
mod recurring;
mod sql;
pub mod targets;
mod telemetry;

pub use client::admin::{DueTimeline, NodeInfo, TaskQuery, MAX_PAGE};
pub use client::bulk::{Redrive, REDRIVE_GROUP};
pub use client::connection::CallerConnection;
pub use client::counts::{BoundedCounts, Throughput, MAX_THROUGHPUT_READ};
pub use client::export::PendingTask;
pub use client::grouped::{Grouped, MAX_GROUP};
pub use client::pull::{
    Claim, ClaimRequest, Leased, Nack, NackOutcome, Pulls, WorkerInfo, MAX_CLAIM, MAX_CLAIM_WAIT,
    MAX_LEASE, MAX_WORKER_NAME, MIN_LEASE,
};
pub use client::schedule::{Schedule, Scheduled};
pub use client::store::{Store, StoreBuilder};
pub use error::Error;
pub use jobs::{JobArgs, JobContext, JobOptions, Workers};
pub use model::attempt::Task;
pub use model::attempts::{AttemptInfo, AttemptOutcome, Receipt, MAX_ATTEMPT_DETAIL};
pub use model::backoff::Backoff;
pub use model::envelope::{
    url_is_under, Destination, Envelope, MAX_DESTINATION_HEADERS, MAX_ENVELOPE,
};
pub use model::failure::{Failure, MAX_RETRY_AFTER};
pub use model::flow::{QueueLimits, QueueSettings, Rate, RetryPolicy, MAX_LIMIT};
pub use model::lateness::{Lateness, LATENESS_BOUNDS_MS};
pub use model::limits::{
    MAX_IDEMPOTENCY_KEY, MAX_KIND, MAX_PARTITION_KEY, MAX_PAYLOAD, MAX_RUN_AT,
};
pub use model::new_task::NewTask;
pub use model::queue::{DEFAULT_QUEUE, MAX_QUEUE_NAME};
pub use model::task::{ParseStateError, StateCounts, TaskId, TaskInfo, TaskState};
pub use model::time::parse_time;
pub use node::delivery::{Deliveries, Delivery};
pub use node::events::SchedulerStats;
pub use node::scheduler::{Scheduler, SchedulerBuilder};
pub use recurring::{
    CatchUp, Recurring, RecurringInfo, Registered, MAX_CATCH_UP, MAX_RECURRING_NAME, MIN_INTERVAL,
};
pub use sql::commits::Commits;
pub use sql::schema::DEFAULT_SHARDS;
#[cfg(feature = "webhook")]
pub use targets::{verify_webhook, Webhook, WebhookBuilder};
pub use targets::{Delivered, Target};
#[cfg(feature = "nats")]
pub use targets::{JetStream, JetStreamBuilder};
pub use telemetry::describe_metrics;

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
