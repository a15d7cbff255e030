//! Dispatch: what the wheel fires is claimed in batches, and each claimed
//! task is delivered (to the handler, or on the stream) under a supervisor
//! that ends the attempt by its deadline and records the outcome.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use crate::error::Error;
use crate::model::task::TaskState;
use crate::node::delivery::{Delivery, Task};
use crate::node::outcome::Counters;
use crate::node::report::Failing;
use crate::node::window::Retry;
use crate::node::Node;
use crate::sql::claims::Due;
use crate::time::{ms, now_ms};
use tokio_timing_wheel::Expirations;

/// The most ids claimed in one statement.
const CLAIM_BATCH: usize = 500;

/// A handler as the scheduler runs it: its error already in words.
pub(crate) type Handler = Arc<dyn Fn(Task) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// Where deliveries go.
#[derive(Clone)]
pub(crate) enum Mode {
    /// To the handler of each task's queue, by queue index (see
    /// [`Lanes`](crate::model::lanes::Lanes)).
    Handlers(Arc<[Handler]>),
    Stream(mpsc::Sender<Delivery>),
}

/// What a delivery holds while it runs: its place under the node's
/// `max_concurrency`, and under its queue's, if the queue has a limit.
pub(crate) struct Permits {
    _node: OwnedSemaphorePermit,
    _queue: Option<OwnedSemaphorePermit>,
}

/// A fired task waiting for room: ordered so that the heap's top is the
/// lowest priority number, then the earliest due, then the lowest id.
#[derive(Debug, PartialEq, Eq)]
struct Waiting(Due);

impl Ord for Waiting {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let key = |d: &Due| Reverse((d.priority, d.run_at, d.id));
        key(&self.0).cmp(&key(&other.0))
    }
}

impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The fired tasks not yet claimed, a heap per queue. A task is claimed
/// only once there is room for it, under the node's limit and its queue's,
/// so a task waiting here is still scheduled in the store (and counted
/// so), and when room comes the most urgent of its queue goes first.
struct Ready {
    queues: Vec<BinaryHeap<Waiting>>,
    /// The ids in the heaps: a task fired twice waits once.
    ids: HashSet<i64>,
    /// The queue served first in the next round, so that queues take
    /// turns when the node's limit is what binds.
    next: usize,
}

impl Ready {
    fn new(queues: usize) -> Ready {
        Ready {
            queues: (0..queues).map(|_| BinaryHeap::new()).collect(),
            ids: HashSet::new(),
            next: 0,
        }
    }

    fn push(&mut self, node: &Node, due: Due) {
        if self.ids.insert(due.id) {
            self.queues[node.window.lanes.index_of(due.lane)].push(Waiting(due));
        }
    }

    /// Takes up to `max` tasks there is room for, a permit each: one from
    /// each queue in turn, most urgent first.
    fn take(&mut self, node: &Node, max: usize) -> Vec<(Due, Permits)> {
        let mut taken = Vec::new();
        let count = self.queues.len();
        let start = self.next;
        self.next = (self.next + 1) % count;
        loop {
            let mut progress = false;
            for k in 0..count {
                if taken.len() == max {
                    return taken;
                }
                let index = (start + k) % count;
                if self.queues[index].is_empty() {
                    continue;
                }
                let Ok(node_permit) = node.semaphore.clone().try_acquire_owned() else {
                    return taken;
                };
                let queue_permit = match &node.queue_limits[index] {
                    None => None,
                    Some(limit) => match limit.clone().try_acquire_owned() {
                        Ok(permit) => Some(permit),
                        Err(_) => continue,
                    },
                };
                let Some(Waiting(due)) = self.queues[index].pop() else {
                    continue;
                };
                self.ids.remove(&due.id);
                taken.push((
                    due,
                    Permits {
                        _node: node_permit,
                        _queue: queue_permit,
                    },
                ));
                progress = true;
            }
            if !progress {
                return taken;
            }
        }
    }
}

/// Claims what the wheel fires as there is room for it, and runs each
/// delivery under its own supervisor, until a graceful shutdown stops it;
/// then waits for the deliveries in flight.
pub(crate) async fn dispatch(node: Arc<Node>, expirations: Expirations<i64, Due>, mode: Mode) {
    let batch = CLAIM_BATCH.min(node.config.max_concurrency);
    let mut fired = expirations.ready_chunks(batch);
    let mut ready = Ready::new(node.window.lanes.queues().len());
    let mut running = JoinSet::new();
    loop {
        let room = ready.take(&node, batch);
        if !room.is_empty() {
            if let Err(err) = claim_and_run(&node, room, &mode, &mut running).await {
                node.report(Failing::Claim, &err);
            }
            // More may have room now.
            continue;
        }
        tokio::select! {
            biased;
            _ = node.stopping.notified() => break,
            Some(_) = running.join_next(), if !running.is_empty() => {}
            chunk = fired.next() => match chunk {
                Some(chunk) => {
                    for expired in chunk {
                        ready.push(&node, expired.into_parts().1);
                    }
                }
                None => break,
            },
        }
    }
    while running.join_next().await.is_some() {}
}

async fn claim_and_run(
    node: &Arc<Node>,
    mut fired: Vec<(Due, Permits)>,
    mode: &Mode,
    running: &mut JoinSet<()>,
) -> Result<(), Error> {
    let window = &node.window;
    // In id order, for the look-ups below; each id once (see `Ready`).
    fired.sort_unstable_by_key(|(due, _)| due.id);
    // Each id registers in its lane before the claim, so the lane is not
    // given back under it. Ids of lanes given back are dropped quietly:
    // the new owner has loaded them. Ids of a lane being given back right
    // now come back shortly, to be claimed here if the release fails or
    // dropped if it succeeds.
    let mut entered: Vec<(Due, Permits)> = Vec::with_capacity(fired.len());
    for (due, permits) in fired {
        if window.shards.enter(due.lane as usize) {
            entered.push((due, permits));
        } else if window.shards.owns(due.lane as usize) {
            window.retry(due, Retry::ShardReleasing).await;
        }
    }
    if entered.is_empty() {
        return Ok(());
    }
    let dues: Vec<Due> = entered.iter().map(|(due, _)| *due).collect();
    // Each delivery must end by `deadline`, measured from before the claim,
    // so that it always ends (and its outcome is written within the grace)
    // before its lock runs out and the task is reclaimed.
    let deadline = Instant::now() + node.config.callback_timeout;
    let now = now_ms();
    let lock = now + ms(node.config.callback_timeout) + ms(node.config.lock_grace);
    let claimed = match node.claims.claim(&dues, now, lock).await {
        Ok(claimed) => claimed,
        Err(err) => {
            exit_all(node, &dues);
            for due in dues {
                window.retry(due, Retry::DatabaseFailed).await;
            }
            return Err(err);
        }
    };
    let claimed_at = now_ms();
    let mut permits: Vec<Option<Permits>> = entered.into_iter().map(|(_, p)| Some(p)).collect();
    let mut taken = vec![false; dues.len()];
    for c in claimed {
        let Ok(at) = dues.binary_search_by_key(&c.attempt.id, |d| d.id) else {
            continue;
        };
        taken[at] = true;
        let Some(permit) = permits[at].take() else {
            continue;
        };
        Counters::bump(&node.counters().delivered);
        let lateness_ms = claimed_at.saturating_sub(c.run_at).max(0);
        let metrics = node.outcomes.queue_metrics(&c.attempt);
        metrics.delivered.increment(1);
        metrics.lateness.record(lateness_ms as f64 / 1000.0);
        let task = Task::from_claimed(c, window.lanes.queue_of(dues[at].lane).clone());
        // The handler, its outcome and whatever they log run in this span.
        let span = tracing::info_span!(
            "ttw_delivery",
            task_id = task.attempt.id,
            queue = %task.queue,
            attempt = task.attempt.number,
            lateness_ms,
        );
        running
            .spawn(supervise(node.clone(), task, mode.clone(), permit, deadline).instrument(span));
    }
    // The claimed ids stay registered until their outcome is recorded.
    let missing: Vec<Due> = dues
        .iter()
        .zip(&taken)
        .filter(|(_, &taken)| !taken)
        .map(|(due, _)| *due)
        .collect();
    exit_all(node, &missing);
    drop(permits);
    // Only after the claimed tasks are running: a failure here must not
    // strand them.
    if !missing.is_empty() {
        if let Err(err) = explain_unclaimed(node, &missing).await {
            // Nothing else would arm these before the next window load:
            // look again shortly, as after a failed claim.
            for due in missing {
                window.retry(due, Retry::DatabaseFailed).await;
            }
            return Err(err);
        }
    }
    Ok(())
}

/// Ends the registration of tasks that will not be delivered.
fn exit_all(node: &Node, dues: &[Due]) {
    for due in dues {
        node.window.exit(due.lane);
    }
}

/// Sorts out fired ids the claim did not take: not due yet by the wall
/// clock (re-armed), another node's lease (counted as lost to fencing), or
/// finished, cancelled or claimed already (dropped).
async fn explain_unclaimed(node: &Node, missing: &[Due]) -> Result<(), Error> {
    if node.faults.fail_explain() {
        return Err(Error::config("unclaimed lookup failed by fault injection"));
    }
    let now = now_ms();
    let ids: Vec<i64> = missing.iter().map(|due| due.id).collect();
    for task in node.claims.why_unclaimed(&ids).await? {
        // Another node's lease: lost to fencing, whether that node has
        // claimed the task by now or not.
        if !task.held {
            Counters::bump(&node.counters().claims_lost);
            node.outcomes.metrics.claims_lost.increment(1);
            continue;
        }
        if task.state != TaskState::Scheduled {
            continue;
        }
        let Ok(at) = ids.binary_search(&task.id) else {
            continue;
        };
        let due = Due {
            run_at: task.run_at,
            ..missing[at]
        };
        if task.run_at > now {
            node.window.arm(due).await;
        } else {
            node.window.retry(due, Retry::NotDueYet).await;
        }
    }
    Ok(())
}

/// Delivers one claimed task and records its outcome, by `deadline`.
async fn supervise(node: Arc<Node>, task: Task, mode: Mode, permits: Permits, deadline: Instant) {
    let outcomes = &node.outcomes;
    let timeout = node.config.callback_timeout;
    let started = Instant::now();
    let failed: Option<String> = match mode {
        // A runtime too busy to start the delivery before its deadline:
        // starting it now could overlap a redelivery after the lock ran
        // out, so the attempt fails without running.
        _ if Instant::now() >= deadline => {
            Some("not started before its deadline (the runtime was too busy)".to_string())
        }
        Mode::Handlers(handlers) => {
            // The handler is called inside the guarded future, so a panic
            // while it makes its future is caught too.
            let handler = handlers[node.window.lanes.index_of(task.attempt.lane)].clone();
            let attempt = task.clone();
            let run = AssertUnwindSafe(async move { handler(attempt).await }).catch_unwind();
            let outcome = match tokio::time::timeout_at(deadline, run).await {
                Ok(Ok(Ok(()))) => Ok(()),
                Ok(Ok(Err(err))) => Err(err),
                Ok(Err(panic)) => Err(format!("handler panicked: {}", panic_message(&*panic))),
                Err(_) => Err(format!("handler timed out after {timeout:?}")),
            };
            match outcome {
                Ok(()) => {
                    if let Err(err) = outcomes.succeed(&task.attempt).await {
                        node.report(Failing::Outcome, &err);
                    }
                    None
                }
                Err(err) => Some(err),
            }
        }
        Mode::Stream(tx) => {
            let (settled_tx, settled_rx) = oneshot::channel();
            let delivery = Delivery {
                task: task.clone(),
                outcomes: outcomes.clone(),
                settled: Some(settled_tx),
                deadline,
            };
            // The send waits only if the stream holds more deliveries than
            // it has room for; it too must end by the deadline.
            match tokio::time::timeout_at(deadline, tx.send(delivery)).await {
                Ok(Err(_)) => Some("no consumer: the delivery stream was dropped".to_string()),
                Err(_) => Some(format!("not taken from the stream within {timeout:?}")),
                Ok(Ok(())) => match tokio::time::timeout_at(deadline, settled_rx).await {
                    Ok(Ok(())) => None,
                    Ok(Err(_)) => Some("delivery dropped without ack".to_string()),
                    Err(_) => Some(format!("not acknowledged within {timeout:?}")),
                },
            }
        }
    };
    if let Some(err) = failed {
        if let Err(err) = outcomes.fail(&task.attempt, &err).await {
            node.report(Failing::Outcome, &err);
        }
    }
    outcomes
        .queue_metrics(&task.attempt)
        .handler
        .record(started.elapsed().as_secs_f64());
    node.window.exit(task.attempt.lane);
    drop(permits);
}

/// What a caught panic said: its message, when it is a string.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_string()
    }
}
