//! A node on a paused clock: the store and the node read the time from a
//! clock that follows Tokio's, paused, so time moves only when the test
//! moves it ([`step`]). Each decision that depends on the time (a lock
//! running out, an occurrence falling due) is checked against that clock,
//! with no sleep: ten virtual minutes take about a real second.
//!
//! A paused runtime would also move its clock by itself, to the next
//! timer, whenever every task waits: and a node's tasks wait for SQLite's
//! thread on every statement, so time would race ahead of the work. The
//! test's own task never waits while the clock is paused (it yields), so
//! the runtime never idles and the clock moves only by
//! [`tokio::time::advance`].

use std::time::Duration;

use tokio::sync::mpsc;

use crate::client::store::{Store, StoreBuilder};
use crate::model::clock::Clock;
use crate::model::task::TaskState;
use crate::recurring::Recurring;
use crate::Scheduler;

/// Where the test clock starts: 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600_000;

/// An in-memory store on a clock at [`T0`] that follows the runtime's.
/// The runtime's clock is paused only once a node runs ([`pause`]): a
/// paused runtime moves to the next timer while a statement runs on
/// SQLite's thread, and with no node the first would be the pool's
/// timeout. That is a day, which the node's own timers always come
/// before.
async fn store_on_test_clock() -> (Store, Clock) {
    let clock = Clock::following_tokio(T0);
    let store = StoreBuilder::default()
        .shards(4)
        .connect_timeout(Duration::from_secs(86_400))
        .clock(clock.clone())
        .sqlite_in_memory()
        .await
        .unwrap();
    (store, clock)
}

/// Pauses the runtime's clock, and so the test clock: from here on time
/// moves only by [`step`]. Returns what the test clock reads.
fn pause(clock: &Clock) -> i64 {
    tokio::time::pause();
    clock.now_ms()
}

/// Moves the paused clock on by `by`, then lets the node work for a
/// moment of real time (5 ms) with the clock standing still: its timers
/// due by now fire, and its statements run.
#[allow(clippy::disallowed_methods)] // the moment of real time
async fn step(by: Duration) {
    tokio::time::advance(by).await;
    let until = std::time::Instant::now() + Duration::from_millis(5);
    while std::time::Instant::now() < until {
        tokio::task::yield_now().await;
    }
}

/// What `rx` receives while the clock moves on in steps of 100 ms, for at
/// most `within` of the test clock.
async fn next<T>(rx: &mut mpsc::UnboundedReceiver<T>, within: Duration) -> Option<T> {
    let step_by = Duration::from_millis(100);
    for _ in 0..=within.as_millis() / step_by.as_millis() {
        if let Ok(got) = rx.try_recv() {
            return Some(got);
        }
        step(step_by).await;
    }
    rx.try_recv().ok()
}

/// A task whose lock another node holds (its node is alive as far as the
/// fence can tell: the lock's epoch is not older than the lease's) is
/// taken back only once its lock runs out by the node's clock, and then
/// delivered: never before `locked_until`, and by the next quiet reclaim
/// after it.
#[tokio::test]
async fn a_lock_is_reclaimed_when_it_runs_out_by_the_node_s_clock() {
    let (store, clock) = store_on_test_clock().await;
    let id = store.schedule("locked elsewhere").await.unwrap();
    let locked_until = clock.now_ms() + 5_000;
    crate::sql::testing::lock_elsewhere(store.db(), id.get(), locked_until)
        .await
        .unwrap();

    let (tx, mut delivered) = mpsc::unbounded_channel();
    let seen = clock.clone();
    let scheduler = Scheduler::builder(store.clone())
        .start(move |task| {
            let (tx, at) = (tx.clone(), seen.now_ms());
            async move {
                let _ = tx.send((task.id(), task.attempt(), at));
                Ok::<_, String>(())
            }
        })
        .await
        .unwrap();
    pause(&clock);
    let (got, attempt, at) = next(&mut delivered, Duration::from_secs(600))
        .await
        .expect("the task was reclaimed within ten virtual minutes");
    assert_eq!(got, id);
    assert_eq!(attempt, 2, "the reclaimed delivery is its second attempt");
    assert!(
        at >= locked_until,
        "delivered {} ms before its lock ran out",
        locked_until - at
    );
    assert!(
        at <= locked_until + crate::node::duties::rescuer::QUIET.as_millis() as i64 + 5_000,
        "delivered {} ms after its lock ran out",
        at - locked_until
    );
    // The clock runs again for what waits on the database alone.
    tokio::time::resume();
    scheduler.shutdown().await.unwrap();
    let info = store.get(id).await.unwrap().unwrap();
    assert_eq!(info.state, TaskState::Done);
}

/// A recurring schedule's occurrences become tasks ahead of time, each due
/// at its occurrence by the store's clock, and each is delivered at its
/// time by the node's: at `t0 + 10 s`, `t0 + 20 s`, `t0 + 30 s` exactly,
/// where `t0` is when the schedule was registered,
/// as the paused clock moves: never before, and before the next one is
/// due (the node works in real time between steps of the clock, so a
/// loaded machine sees it some steps later; precision is measured in real
/// time elsewhere).
#[tokio::test]
async fn recurring_occurrences_run_at_their_times_on_the_node_s_clock() {
    let (store, clock) = store_on_test_clock().await;
    // The runtime's clock still runs while the schedule is registered, so
    // its anchor is read between two readings of the clock.
    let before = clock.now_ms();
    store
        .register_recurring(Recurring::every("tick", Duration::from_secs(10)).payload("t"))
        .await
        .unwrap();
    let after = clock.now_ms();

    let (tx, mut delivered) = mpsc::unbounded_channel();
    let seen = clock.clone();
    let scheduler = Scheduler::builder(store.clone())
        .start(move |task| {
            let (tx, at) = (tx.clone(), seen.now_ms());
            async move {
                let _ = tx.send((crate::model::time::to_ms(task.run_at()).unwrap(), at));
                Ok::<_, String>(())
            }
        })
        .await
        .unwrap();
    pause(&clock);
    let mut first = None;
    for n in 1..=3 {
        let (run_at, at) = next(&mut delivered, Duration::from_secs(60))
            .await
            .expect("an occurrence was delivered within a virtual minute");
        let anchor = *first.get_or_insert(run_at - 10_000);
        assert!(
            (before..=after).contains(&anchor),
            "the schedule's anchor {anchor} is when it was registered ({before}..={after})"
        );
        assert_eq!(run_at, anchor + n * 10_000, "occurrence {n}'s due time");
        assert!(
            (run_at..run_at + 5_000).contains(&at),
            "occurrence {n} delivered {} ms after its time",
            at - run_at
        );
    }
    tokio::time::resume();
    scheduler.shutdown().await.unwrap();
}

/// A node that falls silent (its heartbeats stop, as in a long pause or a
/// partition) keeps its shards until its lease's TTL has run out by the
/// database's clock, here the paused clock too; then the other node takes
/// them, and delivers the silent node's running task once that task's lock
/// has run out, not before.
#[tokio::test]
async fn a_silent_node_s_shards_are_taken_over_after_the_ttl() {
    let (store, clock) = store_on_test_clock().await;
    let ttl = Duration::from_secs(10);
    let node = |id: &str| {
        Scheduler::builder(store.clone())
            .node_id(id)
            .heartbeat(Duration::from_secs(1))
            .lease_ttl(ttl)
            .callback_timeout(Duration::from_secs(5))
    };
    let (tx_a, mut got_a) = mpsc::unbounded_channel();
    let a = node("a")
        .start(move |task| {
            let _ = tx_a.send(task.id());
            // It never answers: its node falls silent with it in hand.
            std::future::pending::<Result<(), String>>()
        })
        .await
        .unwrap();
    let id = store.schedule("held by a").await.unwrap();
    assert_eq!(got_a.recv().await, Some(id), "a delivers it first");
    let locked_until = crate::sql::tasks::locked_until(store.db(), id.get())
        .await
        .unwrap();
    a.node.faults.pause_heartbeat(true);
    let silent_at = clock.now_ms();

    let (tx_b, mut got_b) = mpsc::unbounded_channel();
    let seen = clock.clone();
    let b = node("b")
        .start(move |task| {
            let (tx, at) = (tx_b.clone(), seen.now_ms());
            async move {
                let _ = tx.send((task.id(), at));
                Ok::<_, String>(())
            }
        })
        .await
        .unwrap();
    pause(&clock);
    assert_eq!(b.stats().shards_owned, 0, "a's leases are live");

    // The first moment b holds any shard; then, all of them.
    let mut took_at = None;
    for _ in 0..600 {
        let owned = b.stats().shards_owned;
        if owned > 0 && took_at.is_none() {
            took_at = Some(clock.now_ms());
        }
        if owned == 4 {
            break;
        }
        step(Duration::from_millis(100)).await;
    }
    assert_eq!(b.stats().shards_owned, 4, "b took all of a's shards");
    let took_at = took_at.expect("b took a's shards within a virtual minute");
    let ttl_ms = ttl.as_millis() as i64;
    // a's last stamp came at most a heartbeat before it fell silent.
    assert!(
        took_at >= silent_at - 1_000 + ttl_ms,
        "taken over {} ms after a fell silent, before its TTL",
        took_at - silent_at
    );
    assert!(
        took_at <= silent_at + ttl_ms + 5_000,
        "taken over {} ms after a fell silent",
        took_at - silent_at
    );
    assert!(b.stats().lease_takeovers >= 4, "{:?}", b.stats());

    let (got, at) = next(&mut got_b, Duration::from_secs(120))
        .await
        .expect("b delivered a's task once its lock ran out");
    assert_eq!(got, id);
    assert!(
        at >= locked_until,
        "delivered {} ms before a's lock ran out",
        locked_until - at
    );
    tokio::time::resume();
    a.abort();
    b.shutdown().await.unwrap();
}

/// A task's callback URLs are told of its outcome by tasks of their own,
/// written with the outcome and handed to this process's node at once:
/// the handler of the queue gets each within a few steps of the clock
/// (not at the next catch-up poll, a second later), with `outcome_of`
/// naming the task and the outcome as its payload; a done task tells its
/// `callback`, a dead one its `failure_callback`.
#[tokio::test]
async fn a_callback_task_follows_its_outcome_at_once() {
    use crate::model::envelope::Envelope;

    let (store, clock) = store_on_test_clock().await;
    let tell = Envelope::new()
        .callback("https://hooks.example/done")
        .failure_callback("https://hooks.example/dead");
    let done = store.schedule("pays").envelope(tell.clone()).await.unwrap();
    let dead = store
        .schedule("fails")
        .max_attempts(1)
        .envelope(tell)
        .await
        .unwrap();

    let (tx, mut delivered) = mpsc::unbounded_channel();
    let seen = clock.clone();
    let scheduler = Scheduler::builder(store.clone())
        .start(move |task| {
            let (tx, at) = (tx.clone(), seen.now_ms());
            async move {
                let envelope = task.envelope().cloned().unwrap_or_default();
                let _ = tx.send((
                    task.id(),
                    envelope.outcome_of(),
                    envelope.get_destination().map(|d| d.url().to_string()),
                    task.payload().to_vec(),
                    at,
                ));
                if task.payload() == b"fails" {
                    return Err("declined".to_string());
                }
                Ok(())
            }
        })
        .await
        .unwrap();
    pause(&clock);
    let mut got = Vec::new();
    while got.len() < 4 {
        let Some(one) = next(&mut delivered, Duration::from_secs(10)).await else {
            panic!("four deliveries within ten virtual seconds; got {got:?}");
        };
        got.push(one);
    }
    let at_of = |id| got.iter().find(|g| g.0 == id).map(|g| g.4).unwrap();
    for (origin, url, state) in [
        (done, "https://hooks.example/done", "done"),
        (dead, "https://hooks.example/dead", "dead"),
    ] {
        let callback = got
            .iter()
            .find(|g| g.1 == Some(origin))
            .unwrap_or_else(|| panic!("no callback of {origin}: {got:?}"));
        assert_eq!(callback.2.as_deref(), Some(url));
        let outcome: serde_json::Value = serde_json::from_slice(&callback.3).unwrap();
        assert_eq!(outcome["id"], origin.get());
        assert_eq!(outcome["state"], state);
        let after = callback.4 - at_of(origin);
        assert!(
            (0..=300).contains(&after),
            "the callback of {origin} came {after} ms after it ran"
        );
    }
    tokio::time::resume();
    scheduler.shutdown().await.unwrap();
    assert_eq!(
        store.get(dead).await.unwrap().unwrap().state,
        TaskState::Dead
    );
}

/// The report: PostgreSQL's drain fell by a tenth since the attempt
/// history, its client CPU a task up by a third. The future each delivery
/// spawns had tripled (1.4 KB to 4.5 KB in a release build), carrying the
/// failure's write inline though a failure is the rare path; each of 1,024
/// deliveries in flight was copied and faulted in at that size. Boxed, the
/// failure's write is not part of it: one delivery's future stays under
/// the bound below (measured here, in the test build as in a release
/// one: 1,336 bytes boxed, 4,456 inline; 1,448 before the attempt
/// history).
#[tokio::test]
async fn a_delivery_s_future_does_not_carry_its_failure_s_write() {
    let (store, clock) = store_on_test_clock().await;
    store.schedule("small").await.unwrap();
    let (tx, mut delivered) = mpsc::unbounded_channel();
    let scheduler = Scheduler::builder(store.clone())
        .start(move |task| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(task.id());
                Ok::<_, String>(())
            }
        })
        .await
        .unwrap();
    pause(&clock);
    assert!(next(&mut delivered, Duration::from_secs(10))
        .await
        .is_some());
    let size = crate::node::dispatch::DELIVERY_FUTURE.load(std::sync::atomic::Ordering::Relaxed);
    assert!(size > 0, "a delivery was spawned");
    println!("a delivery's future: {size} bytes");
    assert!(size <= 2_048, "a delivery's future is {size} bytes");
    drop(scheduler);
}
