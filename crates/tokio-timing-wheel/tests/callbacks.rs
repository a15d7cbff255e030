//! Callback mode: a user function per expired timer, run off the driver's
//! task with a timeout and a concurrency limit. Paused clock throughout.

#[path = "support/paused.rs"]
mod paused;

use paused::ms;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::ThreadId;
use std::time::Duration;

use tokio::time::Instant;
use tokio_test::{assert_pending, task};
use tokio_timing_wheel::{Builder, TimingWheel};

/// Every test starts its wheel here, so the recording subscriber is the
/// global default before any callback can log: `tracing` caches whether a
/// log statement is wanted the first time it runs, and a test that set a
/// subscriber of its own could miss the statements other threads ran first.
fn builder() -> Builder {
    events();
    TimingWheel::builder()
}

type Events = Arc<Mutex<Vec<(ThreadId, tracing::Level, String)>>>;

/// The events logged so far, on every thread.
fn events() -> Events {
    static EVENTS: OnceLock<Events> = OnceLock::new();
    Arc::clone(EVENTS.get_or_init(|| {
        let events = Events::default();
        tracing::subscriber::set_global_default(Recorder(Arc::clone(&events)))
            .expect("only this file sets a subscriber");
        events
    }))
}

/// The fields of the events logged at `level` on this thread (which, on a
/// current-thread runtime, ran every task of the test).
fn logged(level: tracing::Level) -> Vec<String> {
    let me = std::thread::current().id();
    let events = events();
    let events = events.lock().unwrap();
    events
        .iter()
        .filter(|(thread, l, _)| *thread == me && *l == level)
        .map(|(_, _, fields)| fields.clone())
        .collect()
}

/// Records every `tracing` event with its thread, level and fields.
struct Recorder(Events);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }
}

impl tracing::Subscriber for Recorder {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        let level = *event.metadata().level();
        let thread = std::thread::current().id();
        self.0.lock().unwrap().push((thread, level, fields.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

type Log = Arc<Mutex<Vec<(u32, Duration)>>>;

/// Records (key, time since `start`) when each callback starts.
fn recorder(
    start: Instant,
) -> (
    Log,
    impl Fn(u32, u64) -> futures::future::BoxFuture<'static, ()> + Send + Sync,
) {
    let log: Log = Arc::default();
    let sink = Arc::clone(&log);
    let callback = move |key: u32, work_ms: u64| -> futures::future::BoxFuture<'static, ()> {
        sink.lock().unwrap().push((key, start.elapsed()));
        Box::pin(async move {
            if work_ms == u64::MAX {
                panic!("callback {key} panicked on purpose");
            }
            tokio::time::sleep(ms(work_ms)).await;
        })
    };
    (log, callback)
}

#[tokio::test(start_paused = true)]
async fn callbacks_run_in_order_and_a_slow_one_delays_nobody() {
    let start = Instant::now();
    let (log, callback) = recorder(start);
    let wheel = builder()
        .callback_timeout(Duration::from_secs(600))
        .build_with_callback(callback);
    wheel.set_timer(1, 300_000, ms(10)).await.unwrap(); // works for five minutes
    for key in 2..=5u32 {
        wheel
            .set_timer(key, 0, ms(u64::from(key) * 10))
            .await
            .unwrap();
    }
    tokio::time::sleep(ms(100)).await;
    // Commands are still answered while the slow callback runs.
    assert_eq!(wheel.remove_timer(9).await.unwrap(), None);
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            (1, ms(10)),
            (2, ms(20)),
            (3, ms(30)),
            (4, ms(40)),
            (5, ms(50))
        ]
    );
    let stats = wheel.stats().await.unwrap();
    assert_eq!((stats.callbacks_running, stats.callbacks_completed), (1, 4));
}

#[tokio::test(start_paused = true)]
async fn a_callback_past_its_timeout_is_cancelled_and_counted() {
    struct Guard(Arc<AtomicUsize>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let dropped = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&dropped);
    let wheel =
        builder()
            .callback_timeout(ms(50))
            .build_with_callback(move |_key: u32, work_ms: u64| {
                let guard = Guard(Arc::clone(&seen));
                async move {
                    tokio::time::sleep(ms(work_ms)).await;
                    drop(guard);
                }
            });
    wheel.set_timer(1, 10_000, ms(1)).await.unwrap(); // hangs past its timeout
    wheel.set_timer(2, 10, ms(1)).await.unwrap();
    tokio::time::sleep(ms(40)).await;
    assert_eq!(wheel.stats().await.unwrap().callbacks_running, 1);
    tokio::time::sleep(ms(20)).await;
    let stats = wheel.stats().await.unwrap();
    assert_eq!(stats.callbacks_timed_out, 1);
    assert_eq!(stats.callbacks_completed, 1);
    assert_eq!(stats.callbacks_running, 0);
    // The hung callback was dropped (cancelled), not left running.
    assert_eq!(dropped.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_callback_is_contained_and_the_wheel_keeps_working() {
    let start = Instant::now();
    let (log, callback) = recorder(start);
    let wheel = builder().build_with_callback(callback);
    wheel.set_timer(1, u64::MAX, ms(10)).await.unwrap(); // panics
    wheel.set_timer(2, 0, ms(20)).await.unwrap();
    tokio::time::sleep(ms(30)).await;
    wheel.set_timer(3, u64::MAX, ms(10)).await.unwrap(); // panics too
    wheel.set_timer(4, 0, ms(20)).await.unwrap();
    tokio::time::sleep(ms(30)).await;
    let stats = wheel.stats().await.unwrap();
    assert_eq!(
        (stats.callbacks_panicked, stats.callbacks_completed),
        (2, 2)
    );
    let keys: Vec<u32> = log.lock().unwrap().iter().map(|(k, _)| *k).collect();
    assert_eq!(keys, [1, 2, 3, 4]);
    assert_eq!(log.lock().unwrap()[3], (4, ms(50)));
}

#[tokio::test(start_paused = true)]
async fn beyond_the_concurrency_limit_timers_wait_their_turn_in_order() {
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let order = Arc::new(Mutex::new(Vec::new()));
    let (r, p, o) = (Arc::clone(&running), Arc::clone(&peak), Arc::clone(&order));
    let wheel = builder()
        .max_concurrency(3)
        .build_with_callback(move |key: u32, _: ()| {
            let (r, p, o) = (Arc::clone(&r), Arc::clone(&p), Arc::clone(&o));
            async move {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                o.lock().unwrap().push(key);
                tokio::time::sleep(ms(100)).await;
                r.fetch_sub(1, Ordering::SeqCst);
            }
        });
    for key in 0..20u32 {
        wheel
            .set_timer(key, (), ms(1 + u64::from(key % 2)))
            .await
            .unwrap();
    }
    tokio::time::sleep(ms(1_000)).await;
    assert_eq!(peak.load(Ordering::SeqCst), 3);
    let mut expected: Vec<u32> = (0..20).filter(|k| k % 2 == 0).collect();
    expected.extend((0..20).filter(|k| k % 2 == 1));
    assert_eq!(
        *order.lock().unwrap(),
        expected,
        "none dropped, expiry order kept"
    );
    assert_eq!(wheel.stats().await.unwrap().callbacks_completed, 20);
}

#[tokio::test(start_paused = true)]
async fn stop_waits_for_running_callbacks_and_returns_what_never_ran() {
    let finished = Arc::new(AtomicUsize::new(0));
    let done = Arc::clone(&finished);
    let wheel = builder()
        .max_concurrency(1)
        .callback_timeout(Duration::from_secs(1))
        .build_with_callback(move |_key: u32, work_ms: u64| {
            let done = Arc::clone(&done);
            async move {
                tokio::time::sleep(ms(work_ms)).await;
                done.fetch_add(1, Ordering::SeqCst);
            }
        });
    wheel.set_timer(1, 200, ms(1)).await.unwrap(); // running at stop
    wheel.set_timer(2, 0, ms(2)).await.unwrap(); // expired, waits for the permit
    wheel
        .set_timer(3, 0, Duration::from_secs(60))
        .await
        .unwrap(); // pending
    tokio::time::sleep(ms(10)).await;
    let start = Instant::now();
    let mut left = wheel.stop().await.unwrap();
    left.sort_unstable();
    assert_eq!(left, [(2, 0), (3, 0)]);
    // It waited for the running callback, which finished.
    assert_eq!(finished.load(Ordering::SeqCst), 1);
    assert!(
        start.elapsed() >= ms(190),
        "stop returned after {:?}",
        start.elapsed()
    );
    assert!(wheel.stop().await.unwrap_err().is_closed());
}

#[tokio::test(start_paused = true)]
async fn stop_waits_no_longer_than_the_callback_timeout() {
    let wheel = builder()
        .callback_timeout(ms(300))
        .build_with_callback(|_key: u32, _: ()| std::future::pending::<()>());
    wheel.set_timer(1, (), ms(1)).await.unwrap();
    tokio::time::sleep(ms(10)).await;
    let start = Instant::now();
    assert_eq!(wheel.stop().await.unwrap(), []);
    let waited = start.elapsed();
    assert!(waited <= ms(300), "stop waited {waited:?}");
}

/// Regression: `stop` told the dispatcher to stop before its command was
/// queued, so a `stop` dropped while it waited for room in a full channel
/// left the wheel running with no callback ever started again.
#[tokio::test(start_paused = true)]
async fn a_stop_dropped_before_it_was_queued_leaves_callbacks_running() {
    let ran = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&ran);
    let wheel = builder()
        .command_capacity(1)
        .build_with_callback(move |_key: u32, _: ()| {
            count.fetch_add(1, Ordering::SeqCst);
            async {}
        });
    // The driver has not run yet: this takes the channel's one slot.
    wheel.try_set_timer(1, (), ms(10)).unwrap();
    let mut stop = task::spawn(wheel.stop());
    assert_pending!(stop.poll());
    drop(stop);
    tokio::time::sleep(ms(20)).await;
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    wheel.set_timer(2, (), ms(10)).await.unwrap();
    tokio::time::sleep(ms(20)).await;
    assert_eq!(ran.load(Ordering::SeqCst), 2);
    assert_eq!(wheel.stats().await.unwrap().callbacks_completed, 2);
}

/// Regression: with a limit above `u32::MAX` (`usize::MAX` for "no limit"),
/// `stop` took back `u32::MAX` permits while callbacks still held others,
/// and returned without waiting for them.
#[tokio::test(start_paused = true)]
async fn stop_waits_for_running_callbacks_with_no_concurrency_limit() {
    let finished = Arc::new(AtomicUsize::new(0));
    let done = Arc::clone(&finished);
    let wheel = builder()
        .max_concurrency(usize::MAX)
        .callback_timeout(Duration::from_secs(1))
        .build_with_callback(move |_key: u32, _: ()| {
            let done = Arc::clone(&done);
            async move {
                tokio::time::sleep(ms(200)).await;
                done.fetch_add(1, Ordering::SeqCst);
            }
        });
    for key in 0..3 {
        wheel.set_timer(key, (), ms(1)).await.unwrap();
    }
    tokio::time::sleep(ms(10)).await;
    assert_eq!(wheel.stats().await.unwrap().callbacks_running, 3);
    let start = Instant::now();
    assert_eq!(wheel.stop().await.unwrap(), []);
    assert_eq!(finished.load(Ordering::SeqCst), 3);
    assert_eq!(start.elapsed(), ms(191));
}

#[tokio::test(start_paused = true)]
async fn panics_and_timeouts_are_reported_through_tracing() {
    let wheel =
        builder()
            .callback_timeout(ms(50))
            .build_with_callback(|key: u32, _: ()| async move {
                match key {
                    1 => panic!("callback one gave up"),
                    2 => std::future::pending().await,
                    _ => {}
                }
            });
    for key in 1..=3 {
        wheel.set_timer(key, (), ms(5)).await.unwrap();
    }
    tokio::time::sleep(ms(100)).await;
    let stats = wheel.stats().await.unwrap();
    assert_eq!(
        (
            stats.callbacks_panicked,
            stats.callbacks_timed_out,
            stats.callbacks_completed
        ),
        (1, 1, 1)
    );
    let errors = logged(tracing::Level::ERROR);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("callback one gave up"), "{errors:?}");
    let warnings = logged(tracing::Level::WARN);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("timed out"), "{warnings:?}");
}

/// Two shards, three callbacks at a time, callbacks that panic or never
/// finish (and time out), and `stop` at a different moment each round:
/// every timer either ran once or was returned by `stop`, never both and
/// never neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_timer_runs_once_or_comes_back_from_stop() {
    const TIMERS: u32 = 2_000;
    for round in 0..20u64 {
        let ran = Arc::new(Mutex::new(Vec::new()));
        let wheel = TimingWheel::builder()
            .shards(2)
            .max_concurrency(3)
            .callback_timeout(Duration::from_millis(20))
            .build_with_callback({
                let ran = Arc::clone(&ran);
                move |key: u32, _value: u32| {
                    let ran = Arc::clone(&ran);
                    async move {
                        ran.lock().unwrap().push(key);
                        if key.is_multiple_of(7) {
                            panic!("a callback that panics");
                        }
                        if key.is_multiple_of(11) {
                            std::future::pending::<()>().await;
                        }
                        tokio::time::sleep(Duration::from_micros(200)).await;
                    }
                }
            });
        for key in 0..TIMERS {
            let delay = Duration::from_micros(u64::from(key % 50) * 100);
            wheel.set_timer(key, key, delay).await.unwrap();
        }
        tokio::time::sleep(Duration::from_micros(1_000 + round * 300)).await;
        let returned = wheel.stop().await.unwrap();
        let mut all: Vec<u32> = ran.lock().unwrap().clone();
        all.extend(returned.into_iter().map(|(key, _)| key));
        all.sort_unstable();
        let total = all.len();
        all.dedup();
        assert_eq!(
            total,
            all.len(),
            "round {round}: a timer ran twice, or ran and came back"
        );
        assert_eq!(all.len(), TIMERS as usize, "round {round}: timers lost");
    }
}
