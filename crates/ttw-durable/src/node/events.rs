//! The one sink for what happens to tasks on a node: each event is reported
//! here once, and this one place bumps the node's counters (read as
//! [`SchedulerStats`]) and its metrics together, so the two never disagree.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::Error;
use crate::model::lateness::{Lateness, SharedLateness};
use crate::node::report::{Failing, LockWatch, Reports};
use crate::node::window::Window;
use crate::telemetry::NodeMetrics;

/// How a node's duties and dispatch report a failed database call: what
/// [`Events::database_failed`] counts and warns of, except an outcome
/// refused by the fence (lost) or a node stopped (closed), which are not
/// failures of the database. A failed claim or outcome may still have
/// committed (the reply was lost) or left a task claimed: its lock will run
/// out, so the locks are watched ([`LockWatch`]).
#[derive(Debug, Clone)]
pub(crate) struct Reporter {
    events: Arc<Events>,
    locks: Arc<LockWatch>,
}

impl Reporter {
    pub(crate) fn new(events: Arc<Events>, locks: Arc<LockWatch>) -> Reporter {
        Reporter { events, locks }
    }

    /// Reports `err`, a failure of a call of kind `kind`.
    pub(crate) fn report(&self, kind: Failing, err: &Error) {
        if err.is_lost() || err.is_closed() {
            return;
        }
        self.events.database_failed(kind, err);
        if matches!(kind, Failing::Claim | Failing::Outcome) {
            self.locks.watch();
        }
    }
}

/// Counters of one node, from [`Scheduler::stats`](crate::Scheduler::stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchedulerStats {
    /// Shard leases this node holds, over all the queues it serves (leases
    /// are per queue and shard: a node serving one queue holds at most the
    /// store's shard count).
    pub shards_owned: u32,
    /// Leases this node took over from another owner (a dead, paused or
    /// departed node, or its own previous run).
    pub lease_takeovers: u64,
    /// Fired tasks this node tried to claim in a shard it believed it held,
    /// refused because another node holds the lease now.
    pub claims_lost: u64,
    /// Outcomes (`ack`, `nack`, handler results) refused because the
    /// attempt no longer belonged to this node.
    pub completions_lost: u64,
    /// Attempts started (claims won).
    pub delivered: u64,
    /// Attempts that succeeded.
    pub succeeded: u64,
    /// Attempts that failed (error, panic, timeout, dropped delivery).
    pub failed: u64,
    /// Failed attempts scheduled for a retry.
    pub retried: u64,
    /// Tasks marked dead.
    pub dead: u64,
    /// Running tasks reclaimed after their lock ran out.
    pub reclaimed: u64,
    /// Deliveries in flight now: claimed and not yet recorded, or fired
    /// and on their way to the claim.
    pub in_flight: u64,
    /// The attempts started, by how late they started.
    pub lateness: Lateness,
}

/// The running counts behind [`SchedulerStats`].
#[derive(Debug, Default)]
struct Counters {
    takeovers: AtomicU64,
    claims_lost: AtomicU64,
    completions_lost: AtomicU64,
    delivered: AtomicU64,
    succeeded: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    dead: AtomicU64,
    reclaimed: AtomicU64,
    lateness: SharedLateness,
}

fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// What happened to tasks on one node, as counts and metrics. Events of a
/// task name its queue by index among the node's queues (see
/// [`Lanes`](crate::model::lanes::Lanes)).
#[derive(Debug)]
pub(crate) struct Events {
    node_id: String,
    counters: Counters,
    metrics: NodeMetrics,
    /// Failing database calls, warned of at most once per interval each.
    reports: Reports,
}

impl Events {
    /// The events of node `node_id`, serving `queues`: its metric handles
    /// are taken now.
    pub(crate) fn new(node_id: &str, queues: &[Arc<str>]) -> Events {
        Events {
            node_id: node_id.to_string(),
            counters: Counters::default(),
            metrics: NodeMetrics::new(node_id, queues),
            reports: Reports::default(),
        }
    }

    /// A database call of kind `kind` failed with `err`: counted
    /// (`ttw_database_errors_total`), and warned of at most once per
    /// interval for each kind.
    pub(crate) fn database_failed(&self, kind: Failing, err: &Error) {
        self.metrics.database_error(kind.label());
        self.reports.failed(&self.node_id, kind, err);
    }

    /// An attempt started: its claim won, `lateness_ms` after its time.
    pub(crate) fn attempt_started(&self, queue: usize, lateness_ms: i64) {
        bump(&self.counters.delivered, 1);
        self.counters
            .lateness
            .record(u64::try_from(lateness_ms).unwrap_or(0));
        let metrics = self.metrics.queue(queue);
        metrics.delivered.increment(1);
        metrics.lateness.record(lateness_ms.max(0) as f64 / 1000.0);
    }

    /// An attempt's outcome was written `seconds` after its delivery
    /// started (whatever the outcome).
    pub(crate) fn settled(&self, queue: usize, seconds: f64) {
        self.metrics.queue(queue).handler.record(seconds);
    }

    /// An attempt succeeded.
    pub(crate) fn succeeded(&self, queue: usize) {
        bump(&self.counters.succeeded, 1);
        self.metrics.queue(queue).succeeded.increment(1);
    }

    /// An attempt failed and its task will run again.
    pub(crate) fn retried(&self, queue: usize) {
        bump(&self.counters.failed, 1);
        bump(&self.counters.retried, 1);
        let metrics = self.metrics.queue(queue);
        metrics.failed.increment(1);
        metrics.retried.increment(1);
    }

    /// An attempt failed and its task, out of attempts, is dead.
    pub(crate) fn failed_dead(&self, queue: usize) {
        bump(&self.counters.failed, 1);
        let metrics = self.metrics.queue(queue);
        metrics.failed.increment(1);
        self.dead(queue);
    }

    /// A running task whose delivery ended without an outcome was taken
    /// back: due again, or dead when out of attempts.
    pub(crate) fn reclaimed(&self, queue: usize, dead: bool) {
        bump(&self.counters.reclaimed, 1);
        self.metrics.queue(queue).reclaimed.increment(1);
        if dead {
            self.dead(queue);
        }
    }

    fn dead(&self, queue: usize) {
        bump(&self.counters.dead, 1);
        self.metrics.queue(queue).dead.increment(1);
    }

    /// An outcome was refused: the attempt no longer belonged to the node.
    pub(crate) fn completion_lost(&self) {
        bump(&self.counters.completions_lost, 1);
        self.metrics.completions_lost.increment(1);
    }

    /// A fired task's claim was refused: another node holds its lease.
    pub(crate) fn claim_lost(&self) {
        bump(&self.counters.claims_lost, 1);
        self.metrics.claims_lost.increment(1);
    }

    /// `n` leases were taken over from other owners.
    pub(crate) fn took_over(&self, n: u64) {
        bump(&self.counters.takeovers, n);
        self.metrics.takeovers.increment(n);
    }

    /// The node's gauges, set at each heartbeat: leases held and tasks in
    /// the wheel.
    pub(crate) fn gauges(&self, shards_owned: u32, window_tasks: usize) {
        self.metrics.shards_owned.set(f64::from(shards_owned));
        self.metrics.window_tasks.set(window_tasks as f64);
    }

    /// The counts now, with the window's shard figures.
    pub(crate) fn snapshot(&self, window: &Window) -> SchedulerStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let c = &self.counters;
        SchedulerStats {
            shards_owned: window.shards.owned_count(),
            lease_takeovers: get(&c.takeovers),
            claims_lost: get(&c.claims_lost),
            completions_lost: get(&c.completions_lost),
            delivered: get(&c.delivered),
            succeeded: get(&c.succeeded),
            failed: get(&c.failed),
            retried: get(&c.retried),
            dead: get(&c.dead),
            reclaimed: get(&c.reclaimed),
            in_flight: window.shards.in_flight_total(),
            lateness: c.lateness.read(),
        }
    }
}
