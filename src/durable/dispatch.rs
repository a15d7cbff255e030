//! Dispatch: what the wheel fires is claimed in batches, and each claimed
//! task is delivered (to the handler, or on the stream) under a supervisor
//! that ends the attempt by its deadline and records the outcome.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::claims::Due;
use super::db::{ms, now_ms};
use super::delivery::{Delivery, Task};
use super::node::Node;
use super::outcome::Counters;
use super::report::Failing;
use super::task::TaskState;
use super::window::Retry;
use super::Error;
use crate::callback::panic_message;
use crate::Expirations;

/// The most ids claimed in one statement.
const CLAIM_BATCH: usize = 500;

/// A handler as the scheduler runs it: its error already in words.
pub(crate) type Handler = Arc<dyn Fn(Task) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// Where deliveries go.
#[derive(Clone)]
pub(crate) enum Mode {
    Handler(Handler),
    Stream(mpsc::Sender<Delivery>),
}

/// Claims what the wheel fires, and runs each delivery under its own
/// supervisor, until a graceful shutdown stops it; then waits for the
/// deliveries in flight.
pub(crate) async fn dispatch(node: Arc<Node>, expirations: Expirations<i64, i64>, mode: Mode) {
    let batch = CLAIM_BATCH.min(node.config.max_concurrency);
    let mut fired = expirations.ready_chunks(batch);
    let mut running = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            _ = node.stopping.notified() => break,
            Some(_) = running.join_next(), if !running.is_empty() => {}
            chunk = fired.next() => match chunk {
                Some(chunk) => {
                    let fired = chunk
                        .into_iter()
                        .map(|e| {
                            let (id, run_at) = e.into_parts();
                            Due { id, run_at }
                        })
                        .collect();
                    if let Err(err) = claim_and_run(&node, fired, &mode, &mut running).await {
                        node.report(Failing::Claim, &err);
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
    mut fired: Vec<Due>,
    mode: &Mode,
    running: &mut JoinSet<()>,
) -> Result<(), Error> {
    let window = &node.window;
    // A task armed twice in quick succession (the in-process announcement,
    // NOTIFY, the catch-up poll, a re-arm) can fire twice into one batch:
    // once from the queue, once armed again after it left the wheel. Its
    // claim takes it once, so it must register in its shard once, or the
    // shard's in-flight count never returns to zero and the shard can never
    // be given back.
    fired.sort_unstable_by_key(|due| due.id);
    fired.dedup_by_key(|due| due.id);
    // Each id registers in its shard before the claim, so the shard is not
    // given back under it. Ids of shards given back are dropped quietly:
    // the new owner has loaded them. Ids of a shard being given back right
    // now come back shortly, to be claimed here if the release fails or
    // dropped if it succeeds.
    let mut ids: Vec<i64> = Vec::with_capacity(fired.len());
    for &due in &fired {
        let shard = window.shard_of(due.id);
        if window.shards.enter(shard) {
            ids.push(due.id);
        } else if window.shards.owns(shard) {
            window.retry(due, Retry::ShardReleasing).await;
        }
    }
    if ids.is_empty() {
        return Ok(());
    }
    let mut permits = match node
        .semaphore
        .clone()
        .acquire_many_owned(ids.len() as u32)
        .await
    {
        Ok(permits) => permits,
        Err(_) => {
            exit_all(node, &ids);
            return Err(Error::closed());
        }
    };
    // Each delivery must end by `deadline`, measured from before the claim,
    // so that it always ends (and its outcome is written within the grace)
    // before its lock runs out and the task is reclaimed.
    let deadline = Instant::now() + node.config.callback_timeout;
    let now = now_ms();
    let lock = now + ms(node.config.callback_timeout) + ms(node.config.lock_grace);
    let claimed = match node.claims.claim(&ids, now, lock).await {
        Ok(claimed) => claimed,
        Err(err) => {
            exit_all(node, &ids);
            for due in fired {
                window.retry(due, Retry::DatabaseFailed).await;
            }
            return Err(err);
        }
    };
    let missing: Vec<i64> = if claimed.len() < ids.len() {
        ids.iter()
            .copied()
            .filter(|id| !claimed.iter().any(|c| c.attempt.id == *id))
            .collect()
    } else {
        Vec::new()
    };
    // The claimed ids stay registered until their outcome is recorded.
    exit_all(node, &missing);
    for c in claimed {
        Counters::bump(&node.counters().delivered);
        let permit = permits.split(1).expect("one permit per claimed id");
        let task = Task::from_claimed(c);
        running.spawn(supervise(
            node.clone(),
            task,
            mode.clone(),
            permit,
            deadline,
        ));
    }
    // Only after the claimed tasks are running: a failure here must not
    // strand them.
    if !missing.is_empty() {
        if let Err(err) = explain_unclaimed(node, &missing).await {
            // Nothing else would arm these before the next window load:
            // look again shortly, as after a failed claim. (`missing` is in
            // id order, as `fired` is.)
            for due in fired {
                if missing.binary_search(&due.id).is_ok() {
                    window.retry(due, Retry::DatabaseFailed).await;
                }
            }
            return Err(err);
        }
    }
    Ok(())
}

/// Ends the registration of ids that will not be delivered.
fn exit_all(node: &Node, ids: &[i64]) {
    for &id in ids {
        node.window.exit(node.window.shard_of(id));
    }
}

/// Sorts out fired ids the claim did not take: not due yet by the wall
/// clock (re-armed), another node's lease (counted as lost to fencing), or
/// finished, cancelled or claimed already (dropped).
async fn explain_unclaimed(node: &Node, missing: &[i64]) -> Result<(), Error> {
    if node.faults.fail_explain() {
        return Err(Error::config("unclaimed lookup failed by fault injection"));
    }
    let now = now_ms();
    for task in node.claims.why_unclaimed(missing).await? {
        // Another node's lease: lost to fencing, whether that node has
        // claimed the task by now or not.
        if !task.held {
            Counters::bump(&node.counters().claims_lost);
            continue;
        }
        if task.state != TaskState::Scheduled {
            continue;
        }
        let due = Due {
            id: task.id,
            run_at: task.run_at,
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
async fn supervise(
    node: Arc<Node>,
    task: Task,
    mode: Mode,
    permit: OwnedSemaphorePermit,
    deadline: Instant,
) {
    let outcomes = &node.outcomes;
    let timeout = node.config.callback_timeout;
    let failed: Option<String> = match mode {
        // A runtime too busy to start the delivery before its deadline:
        // starting it now could overlap a redelivery after the lock ran
        // out, so the attempt fails without running.
        _ if Instant::now() >= deadline => {
            Some("not started before its deadline (the runtime was too busy)".to_string())
        }
        Mode::Handler(handler) => {
            // The handler is called inside the guarded future, so a panic
            // while it makes its future is caught too.
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
    node.window.exit(node.window.shard_of(task.attempt.id));
    drop(permit);
}
