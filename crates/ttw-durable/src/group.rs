//! The one writer of groups, for every write that many callers make at
//! once and that costs a commit each: a scheduler's outcomes (successes,
//! retries, deaths: [`node::outcome`](crate::node::outcome)) and single
//! schedules ([`Grouped`](crate::Grouped), the service's `POST /v1/tasks`).
//!
//! Each caller hands its item to the writer tasks and waits for its
//! answer. A writer waits for its turn at the queue, then for a first
//! item, takes with it every one that accumulated while the writers'
//! previous writes ran (at most the group's bound), lets the next writer
//! wait at the queue while it writes them, answers each, and starts again.
//! A lone item is written at once, never held back to wait for company. On
//! SQLite one writer (writes take turns anyway); on PostgreSQL a few, so a
//! group forms while another commits and the pool keeps connections free
//! for everything else.
//!
//! The queue is unbounded by design: every item in it has a caller waiting
//! for its answer (a delivery's supervisor, an HTTP request), so what waits
//! is bounded by the callers' own limits, and an item handed over is
//! written even if its caller stops waiting (see [`GroupWriter::write`]).

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Mutex};

/// How a group is written: all its items in one go, an answer for each.
pub(crate) trait WriteGroup: Send + Sync + 'static {
    /// What a caller hands over.
    type Item: Send + 'static;
    /// What it is answered.
    type Answer: Send + 'static;

    /// Writes `group` (one item or more) and answers each item, in the
    /// order of `group`. An item left without an answer is answered as
    /// if the writer were gone (`None`).
    fn write(&self, group: Vec<Self::Item>) -> impl Future<Output = Vec<Self::Answer>> + Send;
}

type Pending<W> = (
    <W as WriteGroup>::Item,
    oneshot::Sender<<W as WriteGroup>::Answer>,
);

/// The handle to a group writer's tasks.
pub(crate) struct GroupWriter<W: WriteGroup> {
    tx: mpsc::UnboundedSender<Pending<W>>,
}

impl<W: WriteGroup> Clone for GroupWriter<W> {
    fn clone(&self) -> Self {
        GroupWriter {
            tx: self.tx.clone(),
        }
    }
}

impl<W: WriteGroup> std::fmt::Debug for GroupWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupWriter").finish_non_exhaustive()
    }
}

impl<W: WriteGroup> GroupWriter<W> {
    /// Starts `writers` writer tasks (at least one) on the current
    /// runtime, each writing groups of at most `most` items (at least one);
    /// they end when every handle is gone and what was handed over is
    /// written.
    pub(crate) fn start(write: W, writers: usize, most: usize) -> GroupWriter<W> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (rx, write) = (Arc::new(Mutex::new(rx)), Arc::new(write));
        for _ in 0..writers.max(1) {
            tokio::spawn(run(rx.clone(), write.clone(), most.max(1)));
        }
        GroupWriter { tx }
    }

    /// Hands `item` to the next group; answers once the group is written.
    /// `None` if the writers are gone.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not take the item back: it is written all
    /// the same, and its answer is dropped.
    pub(crate) async fn write(&self, item: W::Item) -> Option<W::Answer> {
        let (reply, answer) = oneshot::channel();
        self.tx.send((item, reply)).ok()?;
        answer.await.ok()
    }
}

/// One writer task (see the module's notes).
async fn run<W: WriteGroup>(
    rx: Arc<Mutex<mpsc::UnboundedReceiver<Pending<W>>>>,
    write: Arc<W>,
    most: usize,
) {
    let mut taken: Vec<Pending<W>> = Vec::with_capacity(most);
    let mut replies = Vec::with_capacity(most);
    loop {
        if rx.lock().await.recv_many(&mut taken, most).await == 0 {
            break;
        }
        let group: Vec<W::Item> = taken
            .drain(..)
            .map(|(item, reply)| {
                replies.push(reply);
                item
            })
            .collect();
        let answers = write.write(group).await;
        for (reply, answer) in replies.drain(..).zip(answers) {
            let _ = reply.send(answer);
        }
        // Any reply left unanswered is dropped: its caller hears `None`.
        replies.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    /// A writer that takes `TOOK` per group (on the paused clock), records
    /// the size of each group and answers each item with itself doubled.
    #[derive(Default, Clone)]
    struct Recorded {
        groups: Arc<Mutex<Vec<usize>>>,
    }

    const TOOK: Duration = Duration::from_millis(10);

    impl WriteGroup for Recorded {
        type Item = u32;
        type Answer = u32;

        async fn write(&self, group: Vec<u32>) -> Vec<u32> {
            self.groups.lock().unwrap().push(group.len());
            tokio::time::sleep(TOOK).await;
            group.into_iter().map(|n| n * 2).collect()
        }
    }

    /// A lone item is written at once, in a group of its own: it waits for
    /// no company, only for its own write.
    #[tokio::test(start_paused = true)]
    async fn a_lone_item_is_written_at_once() {
        let write = Recorded::default();
        let writer = GroupWriter::start(write.clone(), 1, 512);
        let started = tokio::time::Instant::now();
        assert_eq!(writer.write(21).await, Some(42));
        assert_eq!(started.elapsed(), TOOK, "one write's time, no waiting");
        assert_eq!(*write.groups.lock().unwrap(), vec![1]);
    }

    /// Items that arrive while a write runs go together in the next one;
    /// none waits for more than the write before its own, and each gets
    /// its own answer.
    #[tokio::test(start_paused = true)]
    async fn items_arriving_during_a_write_go_in_the_next_one() {
        let write = Recorded::default();
        let writer = GroupWriter::start(write.clone(), 1, 512);
        let first = tokio::spawn({
            let w = writer.clone();
            async move { w.write(1).await }
        });
        // The first write is under way: these five arrive during it.
        tokio::time::sleep(TOOK / 2).await;
        let later: Vec<_> = (2..7)
            .map(|n| {
                let w = writer.clone();
                tokio::spawn(async move { w.write(n).await })
            })
            .collect();
        assert_eq!(first.await.unwrap(), Some(2));
        for (n, answer) in (2..7).zip(later) {
            assert_eq!(answer.await.unwrap(), Some(n * 2));
        }
        assert_eq!(*write.groups.lock().unwrap(), vec![1, 5]);
    }

    /// With two writers (PostgreSQL), an item arriving while one group is
    /// written goes at once with the other writer.
    #[tokio::test(start_paused = true)]
    async fn a_second_writer_takes_what_arrives_during_a_write() {
        let write = Recorded::default();
        let writer = GroupWriter::start(write.clone(), 2, 512);
        let first = tokio::spawn({
            let w = writer.clone();
            async move { w.write(1).await }
        });
        tokio::time::sleep(TOOK / 2).await;
        let started = tokio::time::Instant::now();
        assert_eq!(writer.write(2).await, Some(4));
        assert_eq!(started.elapsed(), TOOK, "its own write's time only");
        assert_eq!(first.await.unwrap(), Some(2));
        assert_eq!(*write.groups.lock().unwrap(), vec![1, 1]);
    }

    /// A group never holds more than its bound: the rest go in the next.
    #[tokio::test(start_paused = true)]
    async fn a_group_never_exceeds_its_bound() {
        let write = Recorded::default();
        let writer = GroupWriter::start(write.clone(), 1, 8);
        let answers: Vec<_> = (0..19)
            .map(|n| {
                let w = writer.clone();
                tokio::spawn(async move { w.write(n).await })
            })
            .collect();
        for (n, answer) in (0..19).zip(answers) {
            assert_eq!(answer.await.unwrap(), Some(n * 2));
        }
        let groups = write.groups.lock().unwrap().clone();
        assert!(groups.iter().all(|&g| g <= 8), "{groups:?}");
        assert_eq!(groups.iter().sum::<usize>(), 19);
    }

    /// A caller that stops waiting does not take its item back: the item is
    /// written with its group.
    #[tokio::test(start_paused = true)]
    async fn an_item_whose_caller_left_is_written_all_the_same() {
        let write = Recorded::default();
        let writer = GroupWriter::start(write.clone(), 1, 512);
        let left = tokio::time::timeout(TOOK / 2, writer.write(1)).await;
        assert!(left.is_err(), "the caller gave up before the write ended");
        assert_eq!(writer.write(2).await, Some(4));
        assert_eq!(*write.groups.lock().unwrap(), vec![1, 1]);
    }
}
