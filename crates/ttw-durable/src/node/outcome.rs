//! What becomes of an attempt: success marks the task done; a failure
//! schedules a retry after the [`Backoff`], or marks the task dead when it
//! is out of attempts. Both are written under the claim's fence, and both
//! are reported to the node's [`Events`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::Error;
use futures::future::BoxFuture;
use futures::FutureExt;

use crate::model::attempt::Attempt;
use crate::model::attempts::Receipt;
use crate::model::backoff::Backoff;
use crate::model::clock::Clock;
use crate::model::failure::Failure;
use crate::model::time::ms;
use crate::node::completer::{Completer, Finished, Success, Write};
use crate::node::config::Config;
use crate::node::events::Events;
use crate::node::faults::Faults;
use crate::node::window::Window;
use crate::sql::claims::{AttemptFailed, Claims, Due, Failed};
use crate::sql::queues;

/// How long a node keeps a queue's backoff from `ttw_queues` before it reads
/// it again (on the next failure).
const RETRY_POLICY_TTL: std::time::Duration = std::time::Duration::from_secs(1);

/// Records outcomes for one node: what a handler's supervisor and a
/// streamed [`Delivery`](crate::Delivery) settle through.
pub(crate) struct Outcomes {
    claims: Claims,
    window: Arc<Window>,
    backoff: Backoff,
    /// Each queue's own backoff (`ttw_queues`), as last read, by queue
    /// index: read again on a failure at most every [`RETRY_POLICY_TTL`].
    queue_backoffs: std::sync::Mutex<HashMap<usize, (tokio::time::Instant, Option<Backoff>)>>,
    /// The attempt limit of tasks scheduled without their own.
    default_max: i64,
    node_id: String,
    /// The node's event sink (see [`Node::events`](crate::node::Node::events)).
    events: Arc<Events>,
    /// What the node takes as now.
    clock: Clock,
    /// The node was aborted: outcomes are no longer written.
    aborted: Arc<AtomicBool>,
    /// Writes successes in batches (see [`Outcomes::new`]).
    completer: Completer,
    /// The node's injected faults (tests only).
    faults: Arc<Faults>,
}

/// Writers of successes on PostgreSQL: a batch is formed while the other
/// is written, and the pool's other connections stay free for claims.
const POSTGRES_WRITERS: usize = 2;

/// The node's successes, written through its statements (see
/// [`Completer`]); nothing once the node was aborted.
struct Successes {
    claims: Claims,
    clock: Clock,
    aborted: Arc<AtomicBool>,
    faults: Arc<Faults>,
}

impl Write for Successes {
    fn many(&self, batch: Vec<Finished>) -> BoxFuture<'static, Result<Vec<Success>, Error>> {
        let (claims, now, aborted) = (
            self.claims.clone(),
            self.clock.now_ms(),
            self.aborted.clone(),
        );
        let injected = self.faults.fail_outcome();
        async move {
            if aborted.load(Ordering::SeqCst) {
                return Err(Error::closed());
            }
            if injected {
                return Err(Error::injected("a batch of successes"));
            }
            claims.complete_many(&batch, now).await
        }
        .boxed()
    }

    fn one(&self, finished: Finished) -> BoxFuture<'static, Result<bool, Error>> {
        let (claims, now, aborted) = (
            self.claims.clone(),
            self.clock.now_ms(),
            self.aborted.clone(),
        );
        let injected = self.faults.fail_outcome();
        async move {
            if aborted.load(Ordering::SeqCst) {
                return Err(Error::closed());
            }
            if injected {
                return Err(Error::injected("a success"));
            }
            Ok(!claims.complete_many(&[finished], now).await?.is_empty())
        }
        .boxed()
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
        // Successes go in batches. On SQLite every write waits for the
        // one writer, so one writer of batches; on PostgreSQL writes run
        // side by side on the pool's connections, so a second writer
        // starts its batch while the first is written.
        let writers = if claims.on_sqlite() {
            1
        } else {
            POSTGRES_WRITERS
        };
        let completer = Completer::start(
            Arc::new(Successes {
                claims: claims.clone(),
                clock: clock.clone(),
                aborted: aborted.clone(),
                faults: faults.clone(),
            }),
            writers,
        );
        Outcomes {
            events,
            clock,
            completer,
            claims,
            window,
            backoff,
            queue_backoffs: std::sync::Mutex::new(HashMap::new()),
            default_max: i64::from(max_attempts),
            node_id,
            aborted,
            faults,
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

    /// Records a successful attempt in the next batch of the node's
    /// completer; answers once it is written.
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
        let written = self.completer.complete(finished).await?;
        if written {
            self.events.succeeded(self.queue_of(attempt));
            Ok(())
        } else {
            self.events.completion_lost();
            Err(Error::lost())
        }
    }

    /// Records a failed attempt: a retry after the backoff (or when the
    /// failure asks for it), or dead (out of attempts, or a permanent
    /// failure).
    pub(crate) async fn fail(&self, attempt: &Attempt, failure: &Failure) -> Result<(), Error> {
        self.check_open()?;
        if self.faults.fail_outcome() {
            return Err(Error::injected("a failed attempt's outcome"));
        }
        let now = self.clock.now_ms();
        let retry_at = match failure.next_attempt_after() {
            Some(wait) => now.saturating_add(ms(wait)),
            None => retry_at(&self.backoff_of(attempt).await, attempt, now),
        };
        let error = failure.message();
        let failed = self
            .claims
            .fail(
                attempt,
                AttemptFailed {
                    error,
                    status: failure.status(),
                    retry_at,
                    default_max: self.default_max,
                    dead_now: failure.is_permanent(),
                    now,
                },
            )
            .await?;
        match failed {
            Some(Failed::Retry(run_at)) => {
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
            Some(Failed::Dead) => {
                self.events.failed_dead(self.queue_of(attempt));
                tracing::warn!(node = %self.node_id, id = attempt.id, error, "task is dead: out of attempts");
                Ok(())
            }
            None => {
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
