//! Dispatch: what the wheel fires is claimed in batches, and each claimed
//! task is delivered (to the handler, or on the stream) under a supervisor
//! that ends the attempt by its deadline and records the outcome.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use crate::error::Error;
use crate::model::attempt::Task;
use crate::model::attempts::Receipt;
use crate::model::due::Due;
use crate::model::failure::Failure;
use crate::model::task::TaskState;
use crate::model::time::ms;
use crate::node::config::Config;
use crate::node::delivery::Delivery;
use crate::node::report::Failing;
use crate::node::waiting_room::{Ended, Permits, WaitingRoom};
use crate::node::window::Retry;
use crate::node::Node;
use crate::sql::claims::{Claimed, Claiming, Unclaimed};
use tokio_timing_wheel::Expirations;

/// The most ids claimed in one statement.
const CLAIM_BATCH: usize = 500;

/// A handler as the scheduler runs it: its error already a [`Failure`].
pub(crate) type Handler =
    Arc<dyn Fn(Task) -> BoxFuture<'static, Result<Receipt, Failure>> + Send + Sync>;

/// Where deliveries go.
#[derive(Clone)]
pub(crate) enum Mode {
    /// To the handler of each task's queue, by queue index (see
    /// [`Lanes`](crate::model::lanes::Lanes)).
    Handlers(Arc<[Handler]>),
    Stream(mpsc::Sender<Delivery>),
}

/// Claims what the wheel fires as there is room for it, and runs each
/// delivery under its own supervisor, until a graceful shutdown stops it;
/// then waits for the deliveries in flight.
pub(crate) async fn dispatch(node: Arc<Node>, expirations: Expirations<i64, Due>, mode: Mode) {
    let waiting = WaitingRoom::new(&node.config, node.window.lanes.clone());
    let pull = node
        .window
        .lanes
        .queues()
        .iter()
        .map(|q| node.config.pull_queues.contains(&**q))
        .collect();
    let dispatcher = Dispatcher {
        node,
        mode,
        waiting,
        running: JoinSet::new(),
        pull,
    };
    dispatcher.run(expirations).await;
}

/// A node's dispatch: the fired tasks waiting for room (`waiting`, with the
/// flow control it saw), the deliveries running, and where they go. Its
/// claims and the sorting out of what they left are its methods; the
/// places its deliveries take (its semaphores) are `waiting`'s.
struct Dispatcher {
    node: Arc<Node>,
    mode: Mode,
    waiting: WaitingRoom,
    running: JoinSet<Ended>,
    /// By queue index: a pull queue, whose fired tasks wake the claims
    /// waiting on it rather than being claimed here.
    pull: Vec<bool>,
}

/// When a claim runs: its `now`, the lock it takes, and the deadline of
/// the deliveries it starts.
#[derive(Debug, Clone, Copy)]
struct ClaimTimes {
    now: i64,
    lock: i64,
    deadline: Instant,
}

impl Dispatcher {
    async fn run(mut self, expirations: Expirations<i64, Due>) {
        let node = self.node.clone();
        let batch = CLAIM_BATCH.min(node.config.max_concurrency);
        let mut fired = expirations.ready_chunks(batch);
        loop {
            let now = Instant::now();
            let room = self.waiting.take(batch, now);
            if !room.is_empty() {
                if let Err(err) = self.claim_and_run(room).await {
                    node.report(Failing::Claim, &err);
                }
                // More may have room now.
                continue;
            }
            let unblock = self.waiting.next_unblock(now);
            tokio::select! {
                biased;
                _ = node.stopping.notified() => break,
                _ = node.wakes.room.notified() => {
                    if node.wakes.take_room_elsewhere() {
                        self.waiting.place_left_here();
                    }
                }
                Some(ended) = self.running.join_next(), if !self.running.is_empty() => {
                    if let Ok(ended) = ended {
                        self.waiting.delivery_ended(ended);
                    }
                }
                _ = tokio::time::sleep_until(unblock.unwrap_or_else(Instant::now)), if unblock.is_some() => {}
                chunk = fired.next() => match chunk {
                    Some(chunk) => {
                        let mut fell_due = None;
                        for expired in chunk {
                            let due = expired.into_parts().1;
                            let index = node.window.lanes.index_of(due.lane);
                            if self.pull[index] {
                                fell_due.get_or_insert_with(Vec::new).push(index);
                            } else {
                                self.waiting.push_fired(due);
                            }
                        }
                        if let Some(queues) = fell_due {
                            self.wake_pulls(queues);
                        }
                    }
                    None => break,
                },
            }
        }
        while self.running.join_next().await.is_some() {}
    }

    /// Tasks of the pull queues `queues` (by index) fell due: the claims
    /// waiting on them in this process look again, and on PostgreSQL those
    /// of other processes are told. The task stays scheduled until a worker
    /// claims it.
    fn wake_pulls(&self, mut queues: Vec<usize>) {
        queues.sort_unstable();
        // Each queue once, with how many of its tasks fell due: as many
        // waiting claims wake, not all of them.
        let mut counted: Vec<(usize, usize)> = Vec::new();
        for i in queues {
            match counted.last_mut() {
                Some((last, n)) if *last == i => *n += 1,
                _ => counted.push((i, 1)),
            }
        }
        let names: Vec<(Arc<str>, usize)> = counted
            .into_iter()
            .map(|(i, n)| (self.node.window.lanes.queues()[i].clone(), n))
            .collect();
        for (queue, n) in &names {
            self.node.store.pull_wakes().wake(queue, *n);
        }
        let claims = self.node.claims.clone();
        tokio::spawn(async move {
            if let Err(err) = claims.announce_pulls(&names).await {
                tracing::warn!(%err, "could not tell other processes that pull tasks fell due");
            }
        });
    }

    async fn claim_and_run(&mut self, mut fired: Vec<(Due, Permits)>) -> Result<(), Error> {
        let node = self.node.clone();
        let window = &node.window;
        // In id order, for the look-ups below; each id once (see `WaitingRoom`).
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
        // Each delivery must end by `deadline`, measured from before the
        // claim, so that it always ends (and its outcome is written within
        // the grace) before its lock runs out and the task is reclaimed.
        let deadline = Instant::now() + node.config.callback_timeout;
        let (now, lock) = claim_times(node.config.clock.now_ms(), &node.config);
        let times = ClaimTimes {
            now,
            lock,
            deadline,
        };
        // The queues with flow control go to the limited claim, a claim each.
        let (mut limited, plain): (Vec<_>, Vec<_>) = entered
            .into_iter()
            .partition(|(due, _)| self.waiting.control[window.lanes.index_of(due.lane)].limited);
        let mut result = Ok(());
        if !plain.is_empty() {
            result = self.claim_plain(plain, times).await;
        }
        while let Some((first, _)) = limited.first() {
            let index = window.lanes.index_of(first.lane);
            let (group, rest): (Vec<_>, Vec<_>) = limited
                .into_iter()
                .partition(|(due, _)| window.lanes.index_of(due.lane) == index);
            limited = rest;
            if let Err(err) = self.claim_queue(index, group, times).await {
                result = Err(err);
            }
        }
        result
    }

    /// The plain claim of `entered` (in id order), for queues without flow
    /// control; a task whose queue turns out to have some waits in `waiting`
    /// for the limited claim.
    async fn claim_plain(
        &mut self,
        entered: Vec<(Due, Permits)>,
        times: ClaimTimes,
    ) -> Result<(), Error> {
        let node = self.node.clone();
        let dues: Vec<Due> = entered.iter().map(|(due, _)| *due).collect();
        let claimed = if node.faults.fail_claim() {
            Err(Error::injected("the claim"))
        } else {
            node.claims
                .claim(Claiming {
                    fired: &dues,
                    now: times.now,
                    locked_until: times.lock,
                })
                .await
        };
        let claimed = match claimed {
            Ok(claimed) => claimed,
            Err(err) => {
                retry_all(&node, dues).await;
                return Err(err);
            }
        };
        let mut permits: Vec<Option<Permits>> = entered.into_iter().map(|(_, p)| Some(p)).collect();
        let taken = self.start_claimed(claimed, &dues, &mut permits, times.deadline);
        // The claimed ids stay registered until their outcome is recorded.
        let missing: Vec<Due> = dues
            .iter()
            .zip(&taken)
            .filter(|(_, &taken)| !taken)
            .map(|(due, _)| *due)
            .collect();
        exit_all(&node, &missing);
        drop(permits);
        // Only after the claimed tasks are running: a failure here must not
        // strand them.
        self.explain_or_retry(missing).await
    }

    /// Sorts out the fired tasks a claim did not take (see
    /// [`explain_unclaimed`](Self::explain_unclaimed)); if that fails, looks
    /// at them again shortly, as after a failed claim (nothing else would
    /// arm them before the next window load).
    async fn explain_or_retry(&mut self, missing: Vec<Due>) -> Result<(), Error> {
        if missing.is_empty() {
            return Ok(());
        }
        if let Err(err) = self.explain_unclaimed(&missing).await {
            for due in missing {
                self.node.window.retry(due, Retry::DatabaseFailed).await;
            }
            return Err(err);
        }
        Ok(())
    }

    /// The limited claim of `group` (in id order), the fired tasks of queue
    /// `index`: what its limits leave behind waits in `waiting`, in due order,
    /// until they may allow more.
    async fn claim_queue(
        &mut self,
        index: usize,
        group: Vec<(Due, Permits)>,
        times: ClaimTimes,
    ) -> Result<(), Error> {
        let node = self.node.clone();
        let dues: Vec<Due> = group.iter().map(|(due, _)| *due).collect();
        let queue = node.window.lanes.queues()[index].clone();
        let claimed = if node.faults.fail_claim() {
            Err(Error::injected("the claim"))
        } else {
            node.claims
                .claim_limited(
                    &queue,
                    Claiming {
                        fired: &dues,
                        now: times.now,
                        locked_until: times.lock,
                    },
                )
                .await
        };
        let limited = match claimed {
            Ok(limited) => limited,
            Err(err) => {
                retry_all(&node, dues).await;
                return Err(err);
            }
        };
        self.waiting
            .limited_claim(index, limited.controlled, limited.wait, &limited.full_keys);
        let mut permits: Vec<Option<Permits>> = group.into_iter().map(|(_, p)| Some(p)).collect();
        let taken = self.start_claimed(limited.claimed, &dues, &mut permits, times.deadline);
        drop(permits);
        let mut held = limited.held;
        held.sort_unstable();
        let mut missing = Vec::new();
        for (due, taken) in dues.iter().zip(taken) {
            if taken {
                continue;
            }
            node.window.exit(due.lane);
            if held.binary_search(&due.id).is_ok() {
                self.waiting.push(*due);
            } else {
                missing.push(*due);
            }
        }
        self.explain_or_retry(missing).await
    }

    /// Starts a supervised delivery of each task `claimed` of `dues` (in id
    /// order), with its permits; answers which of `dues` were claimed.
    fn start_claimed(
        &mut self,
        claimed: Vec<Claimed>,
        dues: &[Due],
        permits: &mut [Option<Permits>],
        deadline: Instant,
    ) -> Vec<bool> {
        let node = &self.node;
        let window = &node.window;
        let claimed_at = node.config.clock.now_ms();
        let mut taken = vec![false; dues.len()];
        for c in claimed {
            let Ok(at) = dues.binary_search_by_key(&c.attempt.id, |d| d.id) else {
                continue;
            };
            taken[at] = true;
            let Some(permit) = permits[at].take() else {
                continue;
            };
            let lateness_ms = claimed_at.saturating_sub(c.run_at).max(0);
            node.events()
                .attempt_started(node.outcomes.queue_of(&c.attempt), lateness_ms);
            let task = c.into_task(window.lanes.queue_of(dues[at].lane).clone());
            // The handler, its outcome and whatever they log run in this
            // span, which carries the trace context the task was scheduled
            // with, if any: with the feature `opentelemetry`, as its parent.
            let span = tracing::info_span!(
                "ttw_delivery",
                task_id = task.attempt.id,
                queue = %task.queue,
                attempt = task.attempt.number,
                lateness_ms,
                traceparent = tracing::field::Empty,
            );
            if let Some(envelope) = task.envelope() {
                if let Some(parent) = envelope.get_traceparent() {
                    span.record("traceparent", parent);
                    #[cfg(feature = "opentelemetry")]
                    crate::node::trace::adopt(&span, parent, envelope.get_tracestate());
                }
            }
            let delivery = supervise(node.clone(), task, self.mode.clone(), permit, deadline);
            #[cfg(test)]
            DELIVERY_FUTURE.fetch_max(
                std::mem::size_of_val(&delivery),
                std::sync::atomic::Ordering::Relaxed,
            );
            self.running.spawn(delivery.instrument(span));
        }
        taken
    }

    /// Sorts out fired ids the claim did not take: not due yet by the wall
    /// clock (re-armed), another node's lease (counted as lost to fencing),
    /// or finished, cancelled or claimed already (dropped).
    async fn explain_unclaimed(&mut self, missing: &[Due]) -> Result<(), Error> {
        let node = self.node.clone();
        if node.faults.fail_explain() {
            return Err(Error::injected("the unclaimed lookup"));
        }
        let now = node.config.clock.now_ms();
        let ids: Vec<i64> = missing.iter().map(|due| due.id).collect();
        for task in node.claims.why_unclaimed(&ids).await? {
            let verdict = verdict(&task, now);
            if verdict == Verdict::LostToFencing {
                node.events().claim_lost();
            }
            let Ok(at) = ids.binary_search(&task.id) else {
                continue;
            };
            let due = Due {
                run_at: task.run_at,
                ..missing[at]
            };
            match verdict {
                Verdict::LostToFencing | Verdict::Gone => {}
                Verdict::NotDue => node.window.arm(due).await,
                Verdict::Again => node.window.retry(due, Retry::NotDueYet).await,
                Verdict::Controlled => {
                    let index = node.window.lanes.index_of(due.lane);
                    self.waiting.control[index].limited = true;
                    self.waiting.push(due);
                }
            }
        }
        Ok(())
    }
}

/// A claim of `dues` failed: each leaves its lane and is looked at again
/// shortly.
async fn retry_all(node: &Node, dues: Vec<Due>) {
    exit_all(node, &dues);
    for due in dues {
        node.window.retry(due, Retry::DatabaseFailed).await;
    }
}

/// Ends the registration of tasks that will not be delivered.
fn exit_all(node: &Node, dues: &[Due]) {
    for due in dues {
        node.window.exit(due.lane);
    }
}

/// When a claim takes tasks, and until when it holds them: every task due
/// at `now` or before (never one due later), locked for the callback
/// timeout and the lock grace after `now`, so its delivery ends and its
/// outcome is written before the lock runs out and it is reclaimed.
fn claim_times(now: i64, config: &Config) -> (i64, i64) {
    let lock = now
        .saturating_add(ms(config.callback_timeout))
        .saturating_add(ms(config.lock_grace));
    (now, lock)
}

/// What becomes of a fired task that the claim did not take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Another node's lease: lost to fencing, whether that node has
    /// claimed the task by now or not.
    LostToFencing,
    /// Finished, cancelled or claimed already: nothing to do.
    Gone,
    /// Not due by this node's clock (moved later, or the wheel fired a
    /// moment early by the wall clock): armed again for its time.
    NotDue,
    /// Due and scheduled, yet not taken (the database's clock disagreed by
    /// a moment): looked at again shortly.
    Again,
    /// Due and scheduled in a queue that is paused or limited: it waits on
    /// this node for the limited claim.
    Controlled,
}

/// The verdict on `task`, read back after a claim that did not take it, at
/// `now` by the node's clock.
fn verdict(task: &Unclaimed, now: i64) -> Verdict {
    if !task.held {
        Verdict::LostToFencing
    } else if task.state != TaskState::Scheduled {
        Verdict::Gone
    } else if task.run_at > now {
        Verdict::NotDue
    } else if task.controlled {
        Verdict::Controlled
    } else {
        Verdict::Again
    }
}

/// Delivers one claimed task and records its outcome, by `deadline`.
///
/// A handler that succeeded gives its places back as soon as it returns,
/// before its success is written (in the completer's next batch): the
/// limits count handlers running (requests to a receiver, for a target),
/// and the next claim need not wait for that write. The task stays
/// registered in its lane, and counted among the tasks not yet settled
/// (at most twice `max_concurrency`), until the write. A failed attempt,
/// written by itself, and a streamed delivery keep their places until
/// their outcome is written.
async fn supervise(
    node: Arc<Node>,
    task: Task,
    mode: Mode,
    mut permits: Permits,
    deadline: Instant,
) -> Ended {
    let outcomes = &node.outcomes;
    let timeout = node.config.callback_timeout;
    let started = Instant::now();
    let failed: Option<Failure> = match mode {
        // A runtime too busy to start the delivery before its deadline:
        // starting it now could overlap a redelivery after the lock ran
        // out, so the attempt fails without running.
        _ if Instant::now() >= deadline => Some(Failure::new(
            "not started before its deadline (the runtime was too busy)",
        )),
        Mode::Handlers(handlers) => {
            // The handler is called inside the guarded future, so a panic
            // while it makes its future is caught too.
            let handler = handlers[node.window.lanes.index_of(task.attempt.lane)].clone();
            let attempt = task.clone();
            let run = AssertUnwindSafe(async move { handler(attempt).await }).catch_unwind();
            let outcome = match tokio::time::timeout_at(deadline, run).await {
                Ok(Ok(Ok(receipt))) => Ok(receipt),
                Ok(Ok(Err(err))) => Err(err),
                Ok(Err(panic)) => Err(Failure::new(format!(
                    "handler panicked: {}",
                    panic_message(&*panic)
                ))),
                Err(_) => Err(Failure::new(format!("handler timed out after {timeout:?}"))),
            };
            match outcome {
                Ok(receipt) => {
                    permits.release_places();
                    node.wakes.room.notify_one();
                    if let Err(err) = outcomes.succeed(&task.attempt, receipt).await {
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
            let failed = match tokio::time::timeout_at(deadline, tx.send(delivery)).await {
                Ok(Err(_)) => Some("no consumer: the delivery stream was dropped".to_string()),
                Err(_) => Some(format!("not taken from the stream within {timeout:?}")),
                Ok(Ok(())) => match tokio::time::timeout_at(deadline, settled_rx).await {
                    Ok(Ok(())) => None,
                    Ok(Err(_)) => Some("delivery dropped without ack".to_string()),
                    Err(_) => Some(format!("not acknowledged within {timeout:?}")),
                },
            };
            failed.map(Failure::new)
        }
    };
    if let Some(err) = failed {
        // Boxed: the failure's write (its statement, the attempt's row, a
        // callback) is the largest state of this future, and every
        // delivery's future is as large as its largest state: inline, it
        // tripled the size of the future each delivery spawns (1.4 KB to
        // 4.5 KB), and the drain paid for it in copies and page faults. A
        // failure is the rare path; it alone allocates.
        if let Err(err) = Box::pin(outcomes.fail(&task.attempt, &err)).await {
            node.report(Failing::Outcome, &err);
        }
    }
    node.events().settled(
        outcomes.queue_of(&task.attempt),
        started.elapsed().as_secs_f64(),
    );
    node.window.exit(task.attempt.lane);
    drop(permits);
    Ended {
        queue: node.window.lanes.index_of(task.attempt.lane),
        key: task.attempt.key,
    }
}

/// The largest future a delivery spawned in this test process, in bytes
/// (see `supervise`'s failure path).
#[cfg(test)]
pub(crate) static DELIVERY_FUTURE: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::clock::Clock;

    fn unclaimed(run_at: i64, state: TaskState, held: bool) -> Unclaimed {
        Unclaimed {
            id: 1,
            state,
            run_at,
            held,
            controlled: false,
        }
    }

    /// A claim takes what is due by the node's clock and locks it for the
    /// callback timeout and the grace from then; as the clock moves, so do
    /// both.
    #[tokio::test(start_paused = true)]
    async fn a_claim_locks_for_the_timeout_and_the_grace_from_now() {
        let clock = Clock::following_tokio(1_000_000);
        let config = Config {
            callback_timeout: Duration::from_secs(30),
            lock_grace: Duration::from_secs(5),
            ..Config::default()
        };
        assert_eq!(claim_times(clock.now_ms(), &config), (1_000_000, 1_035_000));
        tokio::time::advance(Duration::from_millis(1_500)).await;
        assert_eq!(claim_times(clock.now_ms(), &config), (1_001_500, 1_036_500));
    }

    /// A fired task the claim did not take: never delivered early (armed
    /// again while its time is ahead by the node's clock, looked at again
    /// once it has come), lost to fencing in another node's shard, left
    /// alone once finished.
    #[tokio::test(start_paused = true)]
    async fn an_unclaimed_task_waits_for_its_time_by_the_node_s_clock() {
        let clock = Clock::following_tokio(5_000);
        let due_later = unclaimed(5_100, TaskState::Scheduled, true);
        assert_eq!(verdict(&due_later, clock.now_ms()), Verdict::NotDue);
        tokio::time::advance(Duration::from_millis(99)).await;
        assert_eq!(verdict(&due_later, clock.now_ms()), Verdict::NotDue);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(verdict(&due_later, clock.now_ms()), Verdict::Again);

        let now = clock.now_ms();
        assert_eq!(
            verdict(&unclaimed(now + 60_000, TaskState::Scheduled, false), now),
            Verdict::LostToFencing
        );
        for state in [
            TaskState::Running,
            TaskState::Done,
            TaskState::Cancelled,
            TaskState::Dead,
        ] {
            assert_eq!(
                verdict(&unclaimed(0, state, true), now),
                Verdict::Gone,
                "{state:?}"
            );
        }
    }
}
