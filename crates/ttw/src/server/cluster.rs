//! What the console shows beyond tasks: the nodes and the leases they hold
//! (from the store), this node's throughput and lateness over the last
//! hour (sampled from its own counters, [`Stats`]), and who the caller is.
//!
//! The charts are this process's node only: each instance samples its own
//! scheduler, so a console behind a load balancer shows the instance that
//! answered (its `node_id` says which). The counters are the ones
//! `/metrics` exports, read in process, so no Prometheus is needed.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use ttw_durable::{NodeInfo, Scheduler, SchedulerStats, LATENESS_BOUNDS_MS};
use utoipa::ToSchema;

use super::config::{Scope, Token};
use super::wire::rfc3339;

/// The samples kept: an hour at the default interval, and one more so
/// that the hour has as many differences.
const KEPT: usize = 361;

/// This node's counters, sampled every `every`, the last [`KEPT`] kept.
pub(crate) struct Stats {
    every: Duration,
    node_id: Option<String>,
    samples: Mutex<VecDeque<(SystemTime, SchedulerStats)>>,
}

impl Stats {
    pub(crate) fn new(every: Duration, scheduler: Option<&Scheduler>) -> Stats {
        Stats {
            every,
            node_id: scheduler.map(|s| s.node_id().to_string()),
            samples: Mutex::new(VecDeque::with_capacity(KEPT)),
        }
    }

    /// Samples `scheduler` every `every`, for ever; pends for ever without
    /// one.
    pub(crate) async fn sample(&self, scheduler: Option<&Scheduler>) {
        let Some(scheduler) = scheduler else {
            return std::future::pending().await;
        };
        let mut tick = tokio::time::interval(self.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
            samples.push_back((SystemTime::now(), scheduler.stats()));
            while samples.len() > KEPT {
                samples.pop_front();
            }
        }
    }

    /// The samples as the console draws them: one point per interval.
    pub(crate) fn view(&self) -> StatsView {
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let points = samples
            .iter()
            .zip(samples.iter().skip(1))
            .map(|((t0, a), (t1, b))| point(*t0, a, *t1, b))
            .collect();
        let now = samples.back().map(|(_, s)| *s).unwrap_or_default();
        StatsView {
            node_id: self.node_id.clone(),
            every_ms: self.every.as_millis() as u64,
            points,
            totals: TotalsView {
                delivered: now.delivered,
                succeeded: now.succeeded,
                failed: now.failed,
                retried: now.retried,
                dead: now.dead,
                reclaimed: now.reclaimed,
                lease_takeovers: now.lease_takeovers,
                shards_owned: now.shards_owned,
                in_flight: now.in_flight,
            },
        }
    }
}

/// What happened between two samples.
fn point(t0: SystemTime, a: &SchedulerStats, t1: SystemTime, b: &SchedulerStats) -> PointView {
    let seconds = t1
        .duration_since(t0)
        .unwrap_or_default()
        .as_secs_f64()
        .max(0.001);
    let rate = |x: u64, y: u64| (y.saturating_sub(x) as f64 / seconds * 100.0).round() / 100.0;
    let lateness = b.lateness.since(&a.lateness);
    let quantile = |q: f64| {
        lateness.quantile(q).map(|d| {
            if d == Duration::MAX {
                LATENESS_BOUNDS_MS[LATENESS_BOUNDS_MS.len() - 1] + 1
            } else {
                d.as_millis() as u64
            }
        })
    };
    PointView {
        at: rfc3339(t1),
        done_per_s: rate(a.succeeded, b.succeeded),
        failed_per_s: rate(a.failed, b.failed),
        retried_per_s: rate(a.retried, b.retried),
        dead_per_s: rate(a.dead, b.dead),
        started: lateness.count(),
        lateness_p50_ms: quantile(0.5),
        lateness_p90_ms: quantile(0.9),
        lateness_p99_ms: quantile(0.99),
    }
}

/// This node's throughput and lateness over the last hour.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct StatsView {
    /// The node sampled; absent when this instance runs no scheduler (no
    /// points then).
    pub(crate) node_id: Option<String>,
    /// The time between two samples.
    pub(crate) every_ms: u64,
    /// One per interval, oldest first.
    pub(crate) points: Vec<PointView>,
    /// The node's counters since it started.
    pub(crate) totals: TotalsView,
}

/// One interval: rates per second, and how late its deliveries started.
/// A lateness is the upper bound of a bucket (1, 2, 5, 10, 20, 50 ms, ...
/// 300,000 ms); 300,001 means later than five minutes; absent without
/// deliveries.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PointView {
    /// The interval's end.
    #[schema(format = DateTime)]
    pub(crate) at: String,
    pub(crate) done_per_s: f64,
    pub(crate) failed_per_s: f64,
    pub(crate) retried_per_s: f64,
    pub(crate) dead_per_s: f64,
    /// Deliveries started in the interval.
    pub(crate) started: u64,
    pub(crate) lateness_p50_ms: Option<u64>,
    pub(crate) lateness_p90_ms: Option<u64>,
    pub(crate) lateness_p99_ms: Option<u64>,
}

/// A node's counters since it started.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TotalsView {
    pub(crate) delivered: u64,
    pub(crate) succeeded: u64,
    pub(crate) failed: u64,
    pub(crate) retried: u64,
    pub(crate) dead: u64,
    pub(crate) reclaimed: u64,
    pub(crate) lease_takeovers: u64,
    pub(crate) shards_owned: u32,
    pub(crate) in_flight: u64,
}

/// A node as the store knows it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct NodeView {
    pub(crate) node_id: String,
    pub(crate) queues: Vec<String>,
    /// Its last heartbeat (the database's clock).
    #[schema(format = DateTime)]
    pub(crate) heartbeat_at: String,
    pub(crate) heartbeat_ago_ms: u64,
    /// It is shutting down, giving its shards back.
    pub(crate) leaving: bool,
    /// The (queue, shard) leases it holds.
    pub(crate) leases: u32,
    /// When its leases run out unless renewed.
    #[schema(format = DateTime)]
    pub(crate) lease_expires_at: Option<String>,
    /// Its heartbeat is recent enough that it counts as a member.
    pub(crate) live: bool,
    /// Shards it has taken over from another owner since it joined.
    pub(crate) takeovers: u64,
}

impl From<&NodeInfo> for NodeView {
    fn from(n: &NodeInfo) -> NodeView {
        NodeView {
            node_id: n.node_id.clone(),
            queues: n.queues.clone(),
            heartbeat_at: rfc3339(n.heartbeat_at),
            heartbeat_ago_ms: SystemTime::now()
                .duration_since(n.heartbeat_at)
                .unwrap_or_default()
                .as_millis() as u64,
            leaving: n.leaving,
            leases: n.leases,
            lease_expires_at: n.lease_expires_at.map(rfc3339),
            live: n.live,
            takeovers: n.takeovers,
        }
    }
}

/// The nodes, by id.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct NodesView {
    pub(crate) nodes: Vec<NodeView>,
}

/// The caller's token: what the console may offer it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WhoamiView {
    pub(crate) name: String,
    /// read, schedule, admin.
    pub(crate) scopes: Vec<String>,
    /// The queues it is limited to; absent: every queue.
    pub(crate) queues: Option<Vec<String>>,
}

impl From<&Token> for WhoamiView {
    fn from(t: &Token) -> WhoamiView {
        WhoamiView {
            name: t.name.clone(),
            scopes: t
                .scopes
                .iter()
                .map(|s| {
                    match s {
                        Scope::Read => "read",
                        Scope::Schedule => "schedule",
                        Scope::Admin => "admin",
                        Scope::Consume => "consume",
                    }
                    .to_string()
                })
                .collect(),
            queues: t.queues.as_ref().map(|q| q.iter().cloned().collect()),
        }
    }
}
