//! Group commit of successful outcomes. Each success is handed to the
//! node's writer tasks (one on SQLite, where writes take turns anyway; a
//! few on PostgreSQL, where they run side by side): a writer takes all that
//! accumulated while the writers' previous writes ran and writes them as
//! one statement in one transaction, each row under its own fence; a lone
//! outcome is written at once, never held back to wait for company. A success is answered only once its row is written:
//! a node that dies with outcomes unwritten leaves their tasks running, to
//! be reclaimed and delivered again (at least once), never lost. When a
//! batch's statement fails, its outcomes are written one by one, so each
//! gets its own answer (and its own error).

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot, Mutex};

use crate::error::Error;
pub(crate) use crate::sql::claims::{Finished, Success};

/// The most outcomes one statement writes.
pub(crate) const MAX_BATCH: usize = 512;

/// Where successes are written.
pub(crate) trait Write: Send + Sync + 'static {
    /// Writes `batch` in one statement; answers the successes the fence
    /// accepted, in any order (the others no longer held their tasks).
    fn many(&self, batch: Vec<Finished>) -> BoxFuture<'static, Result<Vec<Success>, Error>>;

    /// Writes one success; answers whether the fence accepted it.
    fn one(&self, finished: Finished) -> BoxFuture<'static, Result<bool, Error>>;
}

struct Pending {
    finished: Finished,
    reply: oneshot::Sender<Result<bool, Error>>,
}

/// The handle to a node's writer of successes.
#[derive(Clone)]
pub(crate) struct Completer {
    tx: mpsc::UnboundedSender<Pending>,
}

impl std::fmt::Debug for Completer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completer").finish_non_exhaustive()
    }
}

impl Completer {
    /// Starts `writers` writer tasks (at least one) on the current
    /// runtime; they end when every handle is gone and what they sent is
    /// written.
    pub(crate) fn start(write: Arc<dyn Write>, writers: usize) -> Completer {
        let (tx, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..writers.max(1) {
            tokio::spawn(run(rx.clone(), write.clone()));
        }
        Completer { tx }
    }

    /// Records `success`; answers once it is written: `true` if the fence
    /// accepted it, `false` if the attempt no longer held its task.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not take the success back: it is written
    /// all the same.
    pub(crate) async fn complete(&self, finished: Finished) -> Result<bool, Error> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Pending { finished, reply })
            .map_err(|_| Error::closed())?;
        answer.await.map_err(|_| Error::closed())?
    }
}

/// A writer: waits for its turn at the queue, then for a first success,
/// takes with it every one that has accumulated (at most [`MAX_BATCH`]),
/// lets the next writer wait at the queue while it writes them, answers
/// each, and starts again.
async fn run(rx: Arc<Mutex<mpsc::UnboundedReceiver<Pending>>>, write: Arc<dyn Write>) {
    let mut batch: Vec<Pending> = Vec::with_capacity(MAX_BATCH);
    loop {
        let taken = rx.lock().await.recv_many(&mut batch, MAX_BATCH).await;
        if taken == 0 {
            break;
        }
        // A clone: a receipt without an answer (a handler's) allocates
        // nothing, and the batch is kept for the one-by-one writes.
        let finished: Vec<Finished> = batch.iter().map(|p| p.finished.clone()).collect();
        match write.many(finished).await {
            Ok(mut accepted) => {
                accepted.sort_unstable();
                for pending in batch.drain(..) {
                    let ok = accepted.binary_search(&pending.finished.success).is_ok();
                    let _ = pending.reply.send(Ok(ok));
                }
            }
            Err(err) if err.is_closed() => {
                for pending in batch.drain(..) {
                    let _ = pending.reply.send(Err(Error::closed()));
                }
            }
            Err(err) => {
                tracing::debug!(%err, n = batch.len(), "a batch of outcomes failed; writing them one by one");
                for pending in batch.drain(..) {
                    let answer = write.one(pending.finished).await;
                    let _ = pending.reply.send(answer);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use futures::FutureExt;

    use super::*;

    /// A writer that takes `took` per statement (on the paused clock),
    /// records the size of each batch, refuses odd claims (a stale
    /// attempt), and fails batches while `failing` is set.
    #[derive(Default)]
    struct Recorded {
        batches: Mutex<Vec<usize>>,
        ones: Mutex<usize>,
        failing: std::sync::atomic::AtomicBool,
    }

    const TOOK: Duration = Duration::from_millis(10);

    impl Write for Recorded {
        fn many(&self, batch: Vec<Finished>) -> BoxFuture<'static, Result<Vec<Success>, Error>> {
            self.batches.lock().unwrap().push(batch.len());
            let batch: Vec<Success> = batch.into_iter().map(|f| f.success).collect();
            let failing = self.failing.load(std::sync::atomic::Ordering::SeqCst);
            async move {
                tokio::time::sleep(TOOK).await;
                if failing {
                    return Err(Error::internal("the batch failed"));
                }
                Ok(batch.into_iter().filter(|s| s.claim % 2 == 0).collect())
            }
            .boxed()
        }

        fn one(&self, finished: Finished) -> BoxFuture<'static, Result<bool, Error>> {
            *self.ones.lock().unwrap() += 1;
            let success = finished.success;
            async move { Ok(success.claim % 2 == 0) }.boxed()
        }
    }

    fn success(id: i64, claim: i64) -> Finished {
        Success { id, claim }.into()
    }

    /// A lone outcome is written at once, in a batch of its own: it waits
    /// for no company, only for its own write.
    #[tokio::test(start_paused = true)]
    async fn a_lone_outcome_is_written_at_once() {
        let write = Arc::new(Recorded::default());
        let completer = Completer::start(write.clone(), 1);
        let started = tokio::time::Instant::now();
        assert!(completer.complete(success(1, 2)).await.unwrap());
        assert_eq!(started.elapsed(), TOOK, "one write's time, no waiting");
        assert_eq!(*write.batches.lock().unwrap(), vec![1]);
    }

    /// Outcomes that arrive while a write runs go together in the next
    /// one; none waits for more than the write before its own.
    #[tokio::test(start_paused = true)]
    async fn outcomes_arriving_during_a_write_go_in_the_next_one() {
        let write = Arc::new(Recorded::default());
        let completer = Completer::start(write.clone(), 1);
        let first = tokio::spawn({
            let c = completer.clone();
            async move { c.complete(success(1, 2)).await }
        });
        // The first write is under way: these five arrive during it.
        tokio::time::sleep(TOOK / 2).await;
        let mut later = Vec::new();
        for id in 2..7 {
            let c = completer.clone();
            later.push(tokio::spawn(
                async move { c.complete(success(id, 2)).await },
            ));
        }
        assert!(first.await.unwrap().unwrap());
        for answer in later {
            assert!(answer.await.unwrap().unwrap());
        }
        assert_eq!(*write.batches.lock().unwrap(), vec![1, 5]);
    }

    /// With two writers (PostgreSQL), an outcome arriving while one batch
    /// is written goes at once with the other writer: it waits for no
    /// write but its own.
    #[tokio::test(start_paused = true)]
    async fn a_second_writer_takes_what_arrives_during_a_write() {
        let write = Arc::new(Recorded::default());
        let completer = Completer::start(write.clone(), 2);
        let first = tokio::spawn({
            let c = completer.clone();
            async move { c.complete(success(1, 2)).await }
        });
        tokio::time::sleep(TOOK / 2).await;
        let started = tokio::time::Instant::now();
        assert!(completer.complete(success(2, 2)).await.unwrap());
        assert_eq!(started.elapsed(), TOOK, "its own write's time only");
        assert!(first.await.unwrap().unwrap());
        assert_eq!(*write.batches.lock().unwrap(), vec![1, 1]);
    }

    /// A batch never holds more than its cap: the rest go in the next.
    #[tokio::test(start_paused = true)]
    async fn a_batch_never_exceeds_its_cap() {
        let write = Arc::new(Recorded::default());
        let completer = Completer::start(write.clone(), 1);
        let n = MAX_BATCH * 2 + 3;
        let answers: Vec<_> = (0..n as i64)
            .map(|id| {
                let c = completer.clone();
                tokio::spawn(async move { c.complete(success(id, 2)).await })
            })
            .collect();
        for answer in answers {
            assert!(answer.await.unwrap().unwrap());
        }
        let batches = write.batches.lock().unwrap().clone();
        assert!(batches.iter().all(|&b| b <= MAX_BATCH), "{batches:?}");
        assert_eq!(batches.iter().sum::<usize>(), n);
    }

    /// The fence answers row by row: in one batch, the outcomes it refused
    /// are answered `false` and the others `true`. A batch whose statement
    /// fails is written one by one, each answered for itself.
    #[tokio::test(start_paused = true)]
    async fn each_outcome_gets_its_own_answer() {
        let write = Arc::new(Recorded::default());
        let completer = Completer::start(write.clone(), 1);
        let answers: Vec<_> = [(1, 2), (2, 3), (3, 4)]
            .into_iter()
            .map(|(id, claim)| {
                let c = completer.clone();
                tokio::spawn(async move { c.complete(success(id, claim)).await })
            })
            .collect();
        let mut got = Vec::new();
        for answer in answers {
            got.push(answer.await.unwrap().unwrap());
        }
        assert_eq!(got, vec![true, false, true]);

        write
            .failing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(!completer.complete(success(9, 5)).await.unwrap());
        assert!(completer.complete(success(10, 6)).await.unwrap());
        assert_eq!(*write.ones.lock().unwrap(), 2);
    }
}
