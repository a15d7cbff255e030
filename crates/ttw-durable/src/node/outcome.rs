//! What becomes of an attempt: success marks the task done; a failure
//! schedules a retry after the [`Backoff`], or marks the task dead when it
//! is out of attempts. All three go through the node's one outcome writer
//! ([`GroupWriter`]): a writer takes every outcome that accumulated while
//! the writers' previous writes ran (at most [`MAX_GROUP`]) and writes its
//! successes in one statement and its failures in one transaction, each row
//! under its own fence; a lone outcome is written at once. An outcome is
//! answered only once its row is written: a node that dies with outcomes
//! unwritten leaves their tasks running, to be reclaimed and delivered
//! again (at least once), never lost. When a group's write fails, its
//! outcomes are written one by one, so each gets its own answer (and its
//! own error). Each outcome written is reported to the node's [`Events`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::Error;
use crate::group::{GroupWriter, WriteGroup};
use crate::model::attempt::Attempt;
use crate::model::attempts::Receipt;
use crate::model::backoff::Backoff;
use crate::model::clock::Clock;
use crate::model::due::Due;
use crate::model::failure::Failure;
use crate::model::time::ms;
use crate::node::config::Config;
use crate::node::events::Events;
use crate::node::faults::Faults;
use crate::node::window::Window;
use crate::sql::claims::{Claims, Failed, Failing, Finished, Success};
use crate::sql::queues;

/// How long a node keeps a queue's backoff from `ttw_queues` before it reads
/// it again (on the next failure).
const RETRY_POLICY_TTL: std::time::Duration = std::time::Duration::from_secs(1);

/// The most outcomes one group writes.
pub(crate) const MAX_GROUP: usize = 512;

/// Writers of outcomes on PostgreSQL: a group is formed while the other is
/// written, and the pool's other connections stay free for claims. On
/// SQLite one: every write waits for its one writer anyway.
const POSTGRES_WRITERS: usize = 2;

/// Records outcomes for one node: what a handler's supervisor and a
/// streamed [`Delivery`](crate::Delivery) settle through.
pub(crate) struct Outcomes {
    claims: Claims,
    window: Arc<Window>,
    backoff: Backoff,
    /// Each queue's own backoff (`ttw_queues`), as last read, by queue
    /// index: read again on a failure at most every [`RETRY_POLICY_TTL`].
    queue_backoffs: std::sync::Mutex<HashMap<usize, (tokio::time::Instant, Option<Backoff>)>>,
    node_id: String,
    /// The node's event sink (see [`Node::events`](crate::node::Node::events)).
    events: Arc<Events>,
    /// What the node takes as now.
    clock: Clock,
    /// The node was aborted: outcomes are no longer written.
    aborted: Arc<AtomicBool>,
    /// The node's one writer of outcomes.
    writer: GroupWriter<OutcomeWrites>,
}

/// An outcome handed to the writer.
enum Outcome {
    Succeeded(Finished),
    Failed(Failing),
}

/// What the writer made of an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    /// The task is done.
    Done,
    /// The task is scheduled again at this time (ms).
    Retry(i64),
    /// The task is dead.
    Dead,
    /// The fence refused it: the attempt no longer held its task.
    Refused,
}

impl From<Option<Failed>> for Written {
    fn from(failed: Option<Failed>) -> Written {
        match failed {
            Some(Failed::Retry(run_at)) => Written::Retry(run_at),
            Some(Failed::Dead) => Written::Dead,
            None => Written::Refused,
        }
    }
}

/// How the node's outcomes are written: through its statements, nothing
/// once the node was aborted.
struct OutcomeWrites {
    claims: Claims,
    clock: Clock,
    aborted: Arc<AtomicBool>,
    faults: Arc<Faults>,
    /// The attempt limit of tasks scheduled without their own.
    default_max: i64,
}

type Answers = Vec<Option<Result<Written, Error>>>;

impl WriteGroup for OutcomeWrites {
    type Item = Outcome;
    type Answer = Result<Written, Error>;

    async fn write(&self, group: Vec<Outcome>) -> Vec<Result<Written, Error>> {
        if self.aborted.load(Ordering::SeqCst) {
            return group.iter().map(|_| Err(Error::closed())).collect();
        }
        let now = self.clock.now_ms();
        let mut answers: Answers = group.iter().map(|_| None).collect();
        let (mut done, mut failed) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
        for (i, outcome) in group.into_iter().enumerate() {
            match outcome {
                Outcome::Succeeded(f) => (done.0.push(i), done.1.push(f)),
                Outcome::Failed(f) => (failed.0.push(i), failed.1.push(f)),
            };
        }
        if !done.1.is_empty() {
            self.successes(&done.0, &done.1, now, &mut answers).await;
        }
        if !failed.1.is_empty() {
            self.failures(&failed.0, &failed.1, now, &mut answers).await;
        }
        answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(Error::internal("an outcome was left unanswered"))))
            .collect()
    }
}

impl OutcomeWrites {
    /// Writes the successes `batch` (places `at` of the group) in one
    /// statement; one by one if it fails.
    async fn successes(&self, at: &[usize], batch: &[Finished], now: i64, answers: &mut Answers) {
        let many = if self.faults.fail_outcome() {
            Err(Error::injected("a batch of successes"))
        } else {
            self.claims.complete_many(batch, now).await
        };
        match many {
            Ok(mut accepted) => {
                accepted.sort_unstable();
                for (&i, f) in at.iter().zip(batch) {
                    let ok = accepted.binary_search(&f.success).is_ok();
                    answers[i] = Some(Ok(if ok { Written::Done } else { Written::Refused }));
                }
            }
            Err(err) => {
                tracing::debug!(%err, n = batch.len(), "a group of successes failed; writing them one by one");
                for (&i, f) in at.iter().zip(batch) {
                    let one = if self.faults.fail_outcome() {
                        Err(Error::injected("a success"))
                    } else {
                        self.claims
                            .complete_many(std::slice::from_ref(f), now)
                            .await
                            .map(|w| {
                                if w.is_empty() {
                                    Written::Refused
                                } else {
                                    Written::Done
                                }
                            })
                    };
                    answers[i] = Some(one);
                }
            }
        }
    }

    /// Writes the failures `batch` (places `at` of the group) in one
    /// transaction; one by one if it fails.
    async fn failures(&self, at: &[usize], batch: &[Failing], now: i64, answers: &mut Answers) {
        let many = if self.faults.fail_outcome() {
            Err(Error::injected("a group of failed attempts"))
        } else {
            self.claims.fail_many(batch, now, self.default_max).await
        };
        match many {
            Ok(written) => {
                for (&i, failed) in at.iter().zip(written) {
                    answers[i] = Some(Ok(failed.into()));
                }
            }
            Err(err) => {
                tracing::debug!(%err, n = batch.len(), "a group of failures failed; writing them one by one");
                for (&i, f) in at.iter().zip(batch) {
                    let one = if self.faults.fail_outcome() {
                        Err(Error::injected("a failed attempt's outcome"))
                    } else {
                        self.claims
                            .fail_many(std::slice::from_ref(f), now, self.default_max)
                            .await
                            .map(|mut w| w.pop().flatten().into())
                    };
                    answers[i] = Some(one);
                }
            }
        }
    }
}

impl Outcomes {
    pub(crate) fn new(
        claims: Claims,
        window: Arc<Window>,
        config: &Config,
        node_id: String,
        faults: Arc<Faults>,
        events: Arc<Events>,
    ) -> Outcomes {
        let (backoff, max_attempts, clock) =
            (config.backoff, config.max_attempts, config.clock.clone());
        let aborted = Arc::new(AtomicBool::new(false));
        let writers = if claims.on_sqlite() {
            1
        } else {
            POSTGRES_WRITERS
        };
        let writes = OutcomeWrites {
            claims: claims.clone(),
            clock: clock.clone(),
            aborted: aborted.clone(),
            faults,
            default_max: i64::from(max_attempts),
        };
        Outcomes {
            events,
            clock,
            writer: GroupWriter::start(writes, writers, MAX_GROUP),
            claims,
            window,
            backoff,
            queue_backoffs: std::sync::Mutex::new(HashMap::new()),
            node_id,
            aborted,
        }
    }

    /// From now on, every outcome fails with [`Error::is_closed`]: the node
    /// stopped as a crash would.
    pub(crate) fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
    }

    fn check_open(&self) -> Result<(), Error> {
        if self.aborted.load(Ordering::SeqCst) {
            return Err(Error::closed());
        }
        Ok(())
    }

    /// The backoff of `attempt`'s queue: its own in `ttw_queues` if it has
    /// one (read at most every [`RETRY_POLICY_TTL`]), else the node's. A
    /// read that fails keeps what was known.
    async fn backoff_of(&self, attempt: &Attempt) -> Backoff {
        let index = self.queue_of(attempt);
        let now = tokio::time::Instant::now();
        let known = self
            .queue_backoffs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&index)
            .copied();
        let own = match known {
            Some((at, own)) if now.duration_since(at) < RETRY_POLICY_TTL => own,
            _ => {
                let queue = self.window.lanes.queue_of(attempt.lane).clone();
                match queues::queue_backoff(self.claims.db(), &queue).await {
                    Ok(own) => {
                        self.queue_backoffs
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(index, (now, own));
                        own
                    }
                    Err(_) => known.and_then(|(_, own)| own),
                }
            }
        };
        own.unwrap_or(self.backoff)
    }

    /// The index of `attempt`'s queue among the node's queues, as
    /// [`Events`] take it.
    pub(crate) fn queue_of(&self, attempt: &Attempt) -> usize {
        self.window.lanes.index_of(attempt.lane)
    }

    /// Hands `outcome` to the writer; answers once it is written.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not take the outcome back: it is written
    /// all the same.
    async fn write(&self, outcome: Outcome) -> Result<Written, Error> {
        self.writer
            .write(outcome)
            .await
            .unwrap_or_else(|| Err(Error::closed()))
    }

    /// Records a successful attempt in the writer's next group; answers
    /// once it is written.
    pub(crate) async fn succeed(&self, attempt: &Attempt, receipt: Receipt) -> Result<(), Error> {
        self.check_open()?;
        let finished = Finished {
            success: Success {
                id: attempt.id,
                claim: attempt.claim,
            },
            receipt,
            tell: attempt.tells.done,
        };
        match self.write(Outcome::Succeeded(finished)).await? {
            Written::Done => {
                self.events.succeeded(self.queue_of(attempt));
                Ok(())
            }
            _ => {
                self.events.completion_lost();
                Err(Error::lost())
            }
        }
    }

    /// Records a failed attempt in the writer's next group: a retry after
    /// the backoff (or when the failure asks for it), or dead (out of
    /// attempts, or a permanent failure).
    pub(crate) async fn fail(&self, attempt: &Attempt, failure: &Failure) -> Result<(), Error> {
        self.check_open()?;
        let now = self.clock.now_ms();
        let retry_at = match failure.next_attempt_after() {
            Some(wait) => now.saturating_add(ms(wait)),
            None => retry_at(&self.backoff_of(attempt).await, attempt, now),
        };
        let failing = Failing {
            id: attempt.id,
            claim: attempt.claim,
            tell_dead: attempt.tells.dead,
            error: failure.message().into(),
            status: failure.status(),
            retry_at,
            dead_now: failure.is_permanent(),
        };
        match self.write(Outcome::Failed(failing)).await? {
            Written::Retry(run_at) => {
                self.events.retried(self.queue_of(attempt));
                self.window
                    .arm(Due {
                        id: attempt.id,
                        run_at,
                        lane: attempt.lane,
                        priority: attempt.priority,
                        key: attempt.key,
                    })
                    .await;
                Ok(())
            }
            Written::Dead => {
                self.events.failed_dead(self.queue_of(attempt));
                tracing::warn!(node = %self.node_id, id = attempt.id, error = failure.message(), "task is dead: out of attempts");
                Ok(())
            }
            Written::Refused | Written::Done => {
                self.events.completion_lost();
                Err(Error::lost())
            }
        }
    }
}

/// When the retry of failed `attempt` is due: its backoff after `now`
/// (never before `now`).
fn retry_at(backoff: &Backoff, attempt: &Attempt, now: i64) -> i64 {
    let delay = backoff.delay(attempt.number, attempt.id as u64);
    now.saturating_add(ms(delay))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn attempt(number: u32) -> Attempt {
        Attempt {
            id: 7,
            number,
            claim: i64::from(number),
            lane: 0,
            priority: 0,
            key: 0,
            tells: Default::default(),
        }
    }

    /// A failed attempt's retry is due its backoff after now by the node's
    /// clock: half to all of the nominal delay, doubling per attempt up to
    /// the maximum, and moving with the clock.
    #[tokio::test(start_paused = true)]
    async fn a_retry_is_due_its_backoff_after_the_node_s_now() {
        let clock = Clock::following_tokio(10_000);
        let backoff = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(4));
        let first = retry_at(&backoff, &attempt(1), clock.now_ms());
        assert!((10_500..=11_000).contains(&first), "{first}");
        let third = retry_at(&backoff, &attempt(3), clock.now_ms());
        assert!((12_000..=14_000).contains(&third), "{third}");
        let capped = retry_at(&backoff, &attempt(20), clock.now_ms());
        assert!((12_000..=14_000).contains(&capped), "{capped}");

        tokio::time::advance(Duration::from_secs(60)).await;
        let later = retry_at(&backoff, &attempt(1), clock.now_ms());
        assert!((70_500..=71_000).contains(&later), "{later}");
        assert!(later > clock.now_ms(), "never due before now");
    }
}
