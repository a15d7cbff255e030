//! Writes dropped half way, on SQLite and PostgreSQL: a caller that gives
//! up on a write (a client that hung up, a timeout) at any point of it, two
//! thousand times over every kind of write, leaves the pool, the store and
//! the node as healthy as it found them.
//!
//! These run in real time, with generous bounds.

#[path = "support/rng.rs"]
mod rng;
#[path = "support/settings.rs"]
mod settings;

#[path = "support/backends.rs"]
mod backends;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, SystemTime};

use backends::{Backend, Db};
use rng::Rng;
use settings::fast;
use ttw_durable::{NewTask, Store, TaskId};

/// Polls `work` `polls` times, letting the runtime run between polls, and
/// drops it there unless it finished first.
async fn give_up_after<T>(work: impl Future<Output = T>, polls: u64) -> Option<T> {
    let mut work = std::pin::pin!(work);
    for _ in 0..polls {
        if let Poll::Ready(out) = futures::poll!(work.as_mut()) {
            return Some(out);
        }
        tokio::time::sleep(Duration::from_micros(100)).await;
    }
    None
}

/// One write of each kind the store has, chosen by `kind`.
async fn write(store: &Store, kind: u64, n: u64) -> Result<Vec<TaskId>, ttw_durable::Error> {
    let later = Duration::from_secs(3600);
    match kind {
        // A keyless batch large enough for PostgreSQL's `COPY`.
        0 => Ok(store
            .schedule_batch((0..250).map(|i| NewTask::new(format!("copy {n} {i}")).delay(later)))
            .await?
            .iter()
            .map(|s| s.id())
            .collect()),
        // A keyless batch of one statement.
        1 => Ok(store
            .schedule_batch((0..20).map(|i| NewTask::new(format!("rows {n} {i}")).delay(later)))
            .await?
            .iter()
            .map(|s| s.id())
            .collect()),
        // A keyed batch: a transaction of several statements.
        2 => Ok(store
            .schedule_batch((0..20).map(|i| {
                NewTask::new(format!("keyed {n} {i}"))
                    .delay(later)
                    .idempotency_key(format!("k{n}-{i}"))
            }))
            .await?
            .iter()
            .map(|s| s.id())
            .collect()),
        3 => Ok(vec![store.schedule(format!("one {n}")).delay(later).await?]),
        // A replacement by key: a transaction of its own.
        4 => Ok(vec![
            store
                .schedule(format!("debounced {n}"))
                .idempotency_key(format!("d{}", n % 7))
                .replace_pending()
                .delay(later)
                .await?,
        ]),
        5 => {
            let id = store.schedule(format!("moved {n}")).delay(later).await?;
            store.reschedule(id, SystemTime::now() + later * 2).await?;
            store.cancel(id).await?;
            Ok(vec![])
        }
        _ => unreachable!(),
    }
}

on_both! {
    /// Regression: on PostgreSQL a caller that dropped a batch's future
    /// mid-transaction or mid-`COPY` (an HTTP client that hung up) put the
    /// connection back in the pool half way through the protocol; the next
    /// statements on it failed ("unexpected connection status after
    /// attempting to begin transaction", "expected ParseComplete, got
    /// ReadyForQuery"), the node's among them, and the node stopped
    /// delivering until restarted.
    async fn writes_dropped_at_any_point_leave_the_pool_and_the_node_healthy(db: Db) {
        let store = db.open_with(Store::builder().max_connections(6)).await;
        let delivered: Arc<Mutex<BTreeSet<TaskId>>> = Arc::default();
        let seen = delivered.clone();
        let _node = fast(&store)
            .start(move |task| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().insert(task.id());
                    Ok::<_, String>(())
                }
            })
            .await
            .unwrap();
        let seed = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1;
        println!("seed {seed}");
        let mut rng = Rng(seed);
        let (mut dropped, mut finished) = (0, 0);
        let mut acknowledged = Vec::new();
        for n in 0..2_000 {
            let kind = rng.below(6);
            let polls = 1 + rng.below(8);
            match give_up_after(write(&store, kind, n), polls).await {
                None => dropped += 1,
                Some(Ok(ids)) => {
                    finished += 1;
                    acknowledged.extend(ids);
                }
                Some(Err(err)) => panic!("write {n} (kind {kind}, seed {seed}) failed: {err}"),
            }
        }
        println!("{dropped} writes dropped half way, {finished} finished");
        assert!(dropped > 400, "only {dropped} of 2,000 writes were dropped half way");

        // Well-behaved callers afterwards: every write succeeds.
        for n in 0..60 {
            acknowledged.extend(write(&store, n % 6, 10_000 + n).await.unwrap());
        }
        // Every write acknowledged is stored.
        for id in &acknowledged {
            assert!(store.get(*id).await.unwrap().is_some(), "task {id} was acknowledged, not stored");
        }
        // And the node delivers what falls due.
        let due: BTreeSet<TaskId> = store
            .schedule_batch((0..300).map(|i| NewTask::new(format!("due {i}")).delay(Duration::from_secs(1))))
            .await
            .unwrap()
            .iter()
            .map(|s| s.id())
            .collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let missing = due.difference(&delivered.lock().unwrap()).count();
            if missing == 0 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{missing} of {} tasks due were not delivered within 60 s",
                due.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
