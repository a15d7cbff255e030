//! The durable layer's metrics, through the [`metrics`] facade: this crate
//! records them, and whatever recorder the program installs (a Prometheus
//! exporter, StatsD, none) receives them. With no recorder installed they
//! cost a check and nothing else.
//!
//! The metrics are listed in [`describe_metrics`]'s docs.
//!
//! A node takes its metric handles when it starts: install the recorder
//! before starting schedulers. [`describe_metrics`] gives the recorder each
//! metric's unit and help text.

use std::sync::Arc;

use metrics::{Counter, Gauge, Histogram, Unit};

/// Registers the unit and help text of every metric the durable layer
/// records with the installed recorder (a Prometheus exporter prints them
/// as `# HELP`). Optional; call it after installing the recorder, and
/// install the recorder before starting schedulers: a node takes its
/// metric handles when it starts. With no recorder the metrics cost a
/// check and nothing else.
///
/// | name | type | labels | what |
/// |---|---|---|---|
/// | `ttw_tasks_scheduled_total` | counter | `queue` | tasks created through this process's [`Store`](crate::Store) (one at a time, in batches, in a caller's transaction when inserted, by recurring schedules) |
/// | `ttw_deliveries_total` | counter | `queue` | attempts started: claims this process's nodes won |
/// | `ttw_attempts_succeeded_total` | counter | `queue` | attempts recorded as succeeded |
/// | `ttw_attempts_failed_total` | counter | `queue` | attempts recorded as failed (error, panic, timeout, dropped delivery) |
/// | `ttw_retries_total` | counter | `queue` | failed attempts scheduled to run again |
/// | `ttw_tasks_dead_total` | counter | `queue` | tasks marked dead, out of attempts (after a failed attempt, or when a reclaim finds a lost attempt was the last) |
/// | `ttw_tasks_reclaimed_total` | counter | `queue` | running tasks whose delivery ended without an outcome (the node died, or the lock ran out), taken back by this process's nodes: due again, or dead when out of attempts |
/// | `ttw_lateness_seconds` | histogram | `queue` | from a task's `run_at` to its claim |
/// | `ttw_handler_duration_seconds` | histogram | `queue` | from the start of a delivery to its outcome written (the handler returned, or the streamed delivery settled) |
/// | `ttw_claims_lost_total` | counter | `node` | fired tasks whose claim was refused: another node holds the lease now (fencing) |
/// | `ttw_completions_lost_total` | counter | `node` | outcomes refused: the attempt no longer belonged to the node |
/// | `ttw_lease_takeovers_total` | counter | `node` | leases taken over from another owner |
/// | `ttw_shards_owned` | gauge | `node` | (queue, shard) leases the node holds, set at each heartbeat |
/// | `ttw_window_tasks` | gauge | `node` | tasks waiting in the node's in-memory wheel, set at each heartbeat |
/// | `ttw_database_errors_total` | counter | `kind` | failed database calls of a node: `heartbeat`, `control` (window load, catch-up poll, retention sweep), `claim`, `outcome` |
/// | `ttw_tasks` | gauge | `queue`, `state` | tasks per queue and state, set by [`Store::publish_task_counts`](crate::Store::publish_task_counts) (`ttw server` calls it every 10 s for `/metrics`) |
///
///
///
/// # Examples
///
/// ```
/// // With no recorder installed this does nothing, and is harmless.
/// ttw_durable::describe_metrics();
/// ```
pub fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "ttw_tasks_scheduled_total",
        Unit::Count,
        "Tasks created through this process's store."
    );
    describe_counter!(
        "ttw_deliveries_total",
        Unit::Count,
        "Attempts started (claims won)."
    );
    describe_counter!(
        "ttw_attempts_succeeded_total",
        Unit::Count,
        "Attempts recorded as succeeded."
    );
    describe_counter!(
        "ttw_attempts_failed_total",
        Unit::Count,
        "Attempts recorded as failed."
    );
    describe_counter!(
        "ttw_retries_total",
        Unit::Count,
        "Failed attempts scheduled to run again."
    );
    describe_counter!(
        "ttw_tasks_dead_total",
        Unit::Count,
        "Tasks marked dead, out of attempts."
    );
    describe_counter!(
        "ttw_tasks_reclaimed_total",
        Unit::Count,
        "Running tasks whose delivery ended without an outcome, taken back."
    );
    describe_histogram!(
        "ttw_lateness_seconds",
        Unit::Seconds,
        "From a task's run_at to its claim."
    );
    describe_histogram!(
        "ttw_handler_duration_seconds",
        Unit::Seconds,
        "From the start of a delivery to its outcome."
    );
    describe_counter!(
        "ttw_claims_lost_total",
        Unit::Count,
        "Claims refused by fencing: another node holds the lease."
    );
    describe_counter!(
        "ttw_completions_lost_total",
        Unit::Count,
        "Outcomes refused: the attempt no longer belonged to the node."
    );
    describe_counter!(
        "ttw_lease_takeovers_total",
        Unit::Count,
        "Leases taken over from another owner."
    );
    describe_gauge!(
        "ttw_shards_owned",
        Unit::Count,
        "Queue and shard leases the node holds."
    );
    describe_gauge!(
        "ttw_window_tasks",
        Unit::Count,
        "Tasks waiting in the node's in-memory wheel."
    );
    describe_counter!(
        "ttw_database_errors_total",
        Unit::Count,
        "Failed database calls of a node, by kind."
    );
    describe_gauge!("ttw_tasks", Unit::Count, "Tasks per queue and state.");
}

/// The handles of one queue's metrics on one node, taken once at start so
/// that a delivery records without looking anything up or allocating.
#[derive(Debug)]
pub(crate) struct QueueMetrics {
    pub(crate) delivered: Counter,
    pub(crate) succeeded: Counter,
    pub(crate) failed: Counter,
    pub(crate) retried: Counter,
    pub(crate) dead: Counter,
    pub(crate) reclaimed: Counter,
    pub(crate) lateness: Histogram,
    pub(crate) handler: Histogram,
}

impl QueueMetrics {
    fn new(queue: &Arc<str>) -> QueueMetrics {
        let q = queue.to_string();
        QueueMetrics {
            delivered: metrics::counter!("ttw_deliveries_total", "queue" => q.clone()),
            succeeded: metrics::counter!("ttw_attempts_succeeded_total", "queue" => q.clone()),
            failed: metrics::counter!("ttw_attempts_failed_total", "queue" => q.clone()),
            retried: metrics::counter!("ttw_retries_total", "queue" => q.clone()),
            dead: metrics::counter!("ttw_tasks_dead_total", "queue" => q.clone()),
            reclaimed: metrics::counter!("ttw_tasks_reclaimed_total", "queue" => q.clone()),
            lateness: metrics::histogram!("ttw_lateness_seconds", "queue" => q.clone()),
            handler: metrics::histogram!("ttw_handler_duration_seconds", "queue" => q),
        }
    }
}

/// The metric handles of one node: per queue (by queue index, as the
/// node's lanes number them) and for the node.
#[derive(Debug)]
pub(crate) struct NodeMetrics {
    queues: Vec<QueueMetrics>,
    pub(crate) claims_lost: Counter,
    pub(crate) completions_lost: Counter,
    pub(crate) takeovers: Counter,
    pub(crate) shards_owned: Gauge,
    pub(crate) window_tasks: Gauge,
}

impl NodeMetrics {
    pub(crate) fn new(node: &str, queues: &[Arc<str>]) -> NodeMetrics {
        let node = node.to_string();
        NodeMetrics {
            queues: queues.iter().map(QueueMetrics::new).collect(),
            claims_lost: metrics::counter!("ttw_claims_lost_total", "node" => node.clone()),
            completions_lost: metrics::counter!("ttw_completions_lost_total", "node" => node.clone()),
            takeovers: metrics::counter!("ttw_lease_takeovers_total", "node" => node.clone()),
            shards_owned: metrics::gauge!("ttw_shards_owned", "node" => node.clone()),
            window_tasks: metrics::gauge!("ttw_window_tasks", "node" => node),
        }
    }

    /// The metrics of the queue with index `index` among the node's queues.
    /// Counts one failed database call of the node, by kind.
    pub(crate) fn database_error(&self, kind: &'static str) {
        metrics::counter!("ttw_database_errors_total", "kind" => kind).increment(1);
    }

    pub(crate) fn queue(&self, index: usize) -> &QueueMetrics {
        &self.queues[index]
    }
}

/// Counts tasks created in `queue`.
pub(crate) fn scheduled(queue: &str, n: u64) {
    if n > 0 {
        metrics::counter!("ttw_tasks_scheduled_total", "queue" => queue.to_string()).increment(n);
    }
}

/// Counts tasks created, one queue name per task: each run of one queue is
/// counted at once, so a batch (mostly of one queue) looks its counter up
/// once per run rather than once per task.
pub(crate) fn scheduled_each<'a>(queues: impl IntoIterator<Item = &'a str>) {
    let mut run: Option<(&str, u64)> = None;
    for queue in queues {
        match &mut run {
            Some((current, n)) if *current == queue => *n += 1,
            _ => {
                if let Some((current, n)) = run.replace((queue, 1)) {
                    scheduled(current, n);
                }
            }
        }
    }
    if let Some((current, n)) = run {
        scheduled(current, n);
    }
}

/// Sets the `ttw_tasks` gauge of `queue` in `state` to `n`.
pub(crate) fn task_gauge(queue: &str, state: &'static str, n: u64) {
    metrics::gauge!("ttw_tasks", "queue" => queue.to_string(), "state" => state).set(n as f64);
}
