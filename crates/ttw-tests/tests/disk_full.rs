//! A full disk under the durable layer: every write either commits and says
//! so, or fails with [`Error::is_disk_full`] and leaves nothing behind.
//! Nothing answered `Ok` is lost, nothing refused appears later, and the
//! store and a running scheduler recover by themselves when space returns.
//!
//! Two real faults: SQLite's own size limit (`max_page_count`, through
//! [`StoreBuilder::sqlite_max_size`]), which any user can run; and a small
//! tmpfs filled to its last page under a running scheduler, which needs root
//! to mount and is run by `.ci/run` (`cargo test -p ttw-tests --test
//! disk_full -- --ignored`).
//!
//! [`Error::is_disk_full`]: ttw_durable::Error::is_disk_full
//! [`StoreBuilder::sqlite_max_size`]: ttw_durable::StoreBuilder::sqlite_max_size

#[path = "support/child.rs"]
mod child;
#[path = "support/settings.rs"]
mod settings;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use settings::fast;
use sqlx::Connection;
use tokio::sync::Semaphore;
use ttw_durable::{Store, TaskId, TaskState};

/// A payload of `len` bytes that starts with the number `n`.
fn payload(n: u32, len: usize) -> Vec<u8> {
    let mut p = vec![0xab; len.max(4)];
    p[..4].copy_from_slice(&n.to_be_bytes());
    p
}

fn number(payload: &[u8]) -> u32 {
    u32::from_be_bytes(payload[..4].try_into().unwrap())
}

/// One delivery: the payload's number, the attempt, when it ran, when it
/// was due.
type Delivered = (u32, u32, SystemTime, SystemTime);

/// Every delivery a handler saw.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Delivered>>>);

impl Seen {
    fn record(&self, task: &ttw_durable::Task) {
        self.0.lock().unwrap().push((
            number(task.payload()),
            task.attempt(),
            SystemTime::now(),
            task.run_at(),
        ));
    }

    fn numbers(&self) -> BTreeMap<u32, usize> {
        let mut map = BTreeMap::new();
        for (n, ..) in self.0.lock().unwrap().iter() {
            *map.entry(*n).or_default() += 1;
        }
        map
    }

    fn assert_never_early(&self) {
        for (n, attempt, ran, due) in self.0.lock().unwrap().iter() {
            assert!(ran >= due, "task {n} attempt {attempt} ran early");
        }
    }

    async fn wait_until(&self, within: Duration, done: impl Fn(&BTreeMap<u32, usize>) -> bool) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let numbers = self.numbers();
            if done(&numbers) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "not there within {within:?}; delivered so far: {numbers:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ttw_{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A client whose database may not grow past 1 MiB schedules 8 KiB tasks
/// until it is full: every `Ok` is a distinct id that is stored and
/// delivered once, never early; every refusal is a disk-full error whose
/// task never appears; and a client opened with a larger limit schedules
/// again at once, with the same scheduler still running.
///
/// (SQLite refuses a page past its limit while the statement runs, so this
/// fault is reported even by a statement read only to its first row; the
/// tmpfs test below is the one that fails at commit.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_a_full_database_refuses_is_an_error_and_never_appears() {
    let dir = temp_dir("full_limit");
    let path = dir.join("tasks.db");
    // The scheduler's own store has no limit, so its claims and outcomes go
    // through: this test is about what the client is told.
    let server = Store::builder().shards(4).sqlite(&path).await.unwrap();
    let seen = Seen::default();
    let log = seen.clone();
    let scheduler = fast(&server)
        .start(move |task| {
            log.record(&task);
            async { Ok::<_, String>(()) }
        })
        .await
        .unwrap();

    let client = Store::builder()
        .sqlite_max_size(1 << 20)
        .sqlite(&path)
        .await
        .unwrap();
    let mut stored: BTreeMap<TaskId, u32> = BTreeMap::new();
    let mut refused = BTreeSet::new();
    for n in 0..400u32 {
        let due = Duration::from_millis(300 + u64::from(n % 10) * 50);
        match client.schedule(payload(n, 8 << 10)).delay(due).await {
            Ok(id) => {
                assert!(
                    stored.insert(id, n).is_none(),
                    "id {id} answered twice (for {n} and {})",
                    stored[&id]
                );
            }
            Err(err) => {
                assert!(err.is_disk_full() && err.is_database(), "{err}");
                assert!(err.to_string().contains("disk is full"), "{err}");
                refused.insert(n);
            }
        }
    }
    assert!(
        refused.len() > 200,
        "a 1 MiB database took {} tasks of 8 KiB",
        stored.len()
    );
    assert!(!stored.is_empty());
    for (id, n) in &stored {
        let info = client
            .get(*id)
            .await
            .unwrap()
            .expect("an acknowledged task is stored");
        assert_eq!(number(&info.payload), *n);
    }

    // Raise the limit: a new client (a restart with a new setting) stores
    // the refused tasks, and the scheduler delivers them with the rest.
    let roomy = Store::builder()
        .sqlite_max_size(64 << 20)
        .sqlite(&path)
        .await
        .unwrap();
    for &n in &refused {
        let id = roomy.schedule(payload(n, 8 << 10)).await.unwrap();
        stored.insert(id, n);
    }
    let expected: BTreeSet<u32> = (0..400).collect();
    seen.wait_until(Duration::from_secs(30), |d| d.len() == 400)
        .await;
    let delivered = seen.numbers();
    assert_eq!(delivered.keys().copied().collect::<BTreeSet<_>>(), expected);
    assert!(delivered.values().all(|&k| k == 1), "{delivered:?}");
    seen.assert_never_early();
    scheduler.shutdown().await.unwrap();
    assert_eq!(server.counts().await.unwrap().done, 400);
    drop((server, client, roomy));
    std::fs::remove_dir_all(&dir).ok();
}

/// A small tmpfs, unmounted (lazily, so open files do not stop it) when
/// dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "this test mounts a tmpfs and needs root: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir.to_path_buf())
    }

    /// Fills the filesystem to its last page with one file, and returns it.
    fn fill(&self) -> PathBuf {
        let path = self.0.join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        for chunk in [1 << 20, 4096, 1] {
            let buf = vec![0u8; chunk];
            while file.write_all(&buf).is_ok() {}
        }
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Counts warnings from this crate: the scheduler must report a failing
/// database once per interval, not once per task.
struct Warnings(Arc<AtomicUsize>);

impl tracing::Subscriber for Warnings {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if event.metadata().target().starts_with("ttw_durable") {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Regression: `Store::schedule` read its `INSERT ... RETURNING id` with
/// `fetch_optional`. On SQLite that takes the first row and resets the
/// statement, so the automatic commit happened at the reset and its failure
/// ("database or disk is full", here from a write-ahead log that could not
/// grow) was never seen: a full disk answered `Ok` with an id (often the
/// same id again and again) for tasks it never stored, and they were never
/// delivered.
///
/// A filesystem that fills up under a running scheduler (a real tmpfs,
/// filled to its last page, with a reader holding the write-ahead log open
/// so every commit must grow a file): schedules are refused with a
/// disk-full error; a claim that cannot be written delivers nothing; a
/// completion that cannot be written is not counted, and its task is
/// delivered again once space returns; the failures are warned of a few
/// times, not once per task. When the filler is deleted everything resumes
/// with no restart: every acknowledged task is delivered, never early, and
/// no refused one ever is.
#[test]
#[ignore = "mounts a tmpfs, so needs root; .ci/run runs it with --ignored"]
fn a_full_disk_under_a_running_scheduler_loses_nothing_and_recovers() {
    let warnings = Arc::new(AtomicUsize::new(0));
    let subscriber = Warnings(warnings.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    // One thread: every task of the scheduler logs through this thread's
    // subscriber.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(full_disk(warnings));
}

async fn full_disk(warnings: Arc<AtomicUsize>) {
    let fs = Tmpfs::mount(&temp_dir("full_tmpfs").join("mnt"), "24m");
    let path = fs.0.join("tasks.db");
    // No disk reserve: this scenario keeps the disk full on purpose, and a
    // reserve given up would make room for the schedules it expects to be
    // refused.
    let store = Store::builder()
        .shards(4)
        .sqlite_disk_reserve(0)
        .sqlite(&path)
        .await
        .unwrap();
    let seen = Seen::default();
    let log = seen.clone();
    // The first attempts of tasks 0 and 1 wait for this gate, so that their
    // outcomes (0 succeeds, 1 fails) are written while the disk is full.
    let gate = Arc::new(Semaphore::new(0));
    let held = gate.clone();
    let scheduler = fast(&store)
        .callback_timeout(Duration::from_secs(4))
        .lock_grace(Duration::from_secs(1))
        .start(move |task| {
            log.record(&task);
            let gate = held.clone();
            async move {
                let n = number(task.payload());
                if n < 2 && task.attempt() == 1 {
                    let _ = gate.acquire().await;
                    if n == 1 {
                        return Err("the first attempt of task 1 fails".to_string());
                    }
                }
                Ok::<_, String>(())
            }
        })
        .await
        .unwrap();

    let slow = store.schedule(payload(0, 64)).await.unwrap();
    let failing = store.schedule(payload(1, 64)).await.unwrap();
    seen.wait_until(Duration::from_secs(10), |d| d.len() == 2)
        .await;
    // Due while the disk will be full.
    let mut acknowledged: BTreeSet<u32> = [0, 1].into();
    for n in 2..=20 {
        store
            .schedule(payload(n, 64))
            .delay(Duration::from_millis(1500))
            .await
            .unwrap();
        acknowledged.insert(n);
    }

    // A reader holds the write-ahead log, so no commit can reuse it and
    // every commit must grow a file; then the disk fills up.
    let mut reader = sqlx::SqliteConnection::connect_with(
        &sqlx::sqlite::SqliteConnectOptions::new().filename(&path),
    )
    .await
    .unwrap();
    sqlx::query("BEGIN").execute(&mut reader).await.unwrap();
    sqlx::query("SELECT COUNT(*) FROM ttw_tasks")
        .execute(&mut reader)
        .await
        .unwrap();
    let filler = fs.fill();
    let before = warnings.load(Ordering::SeqCst);

    let mut refused = 0;
    for n in 100..150 {
        match store.schedule(payload(n, 8 << 10)).await {
            Ok(id) => {
                let info = store
                    .get(id)
                    .await
                    .unwrap()
                    .expect("an acknowledged task is stored");
                assert_eq!(number(&info.payload), n);
                acknowledged.insert(n);
            }
            Err(err) => {
                assert!(err.is_disk_full(), "{err}");
                refused += 1;
            }
        }
    }
    assert!(
        refused >= 45,
        "only {refused} of 50 schedules refused on a full disk"
    );

    // The handlers of tasks 0 and 1 end: their outcomes cannot be written.
    gate.add_permits(2);
    // Tasks 2..=20 come due and fire: their claims cannot be written.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let stats = scheduler.stats();
    assert_eq!(
        (stats.succeeded, stats.failed),
        (0, 0),
        "outcomes counted on a full disk: {stats:?}"
    );
    assert_eq!(
        stats.delivered, 2,
        "claims went through on a full disk: {stats:?}"
    );
    assert_eq!(seen.numbers().len(), 2);
    for id in [slow, failing] {
        assert_eq!(
            store.get(id).await.unwrap().unwrap().state,
            TaskState::Running
        );
    }
    let logged = warnings.load(Ordering::SeqCst) - before;
    assert!(
        (1..=4).contains(&logged),
        "{logged} warnings in 2.5 s of failing claims, outcomes and heartbeats"
    );

    // Space comes back.
    std::fs::remove_file(filler).unwrap();
    sqlx::query("COMMIT").execute(&mut reader).await.unwrap();
    drop(reader);
    seen.wait_until(Duration::from_secs(30), |d| {
        acknowledged.iter().all(|n| d.contains_key(n))
            && d.get(&0) == Some(&2)
            && d.get(&1) == Some(&2)
    })
    .await;
    let after = store
        .schedule(payload(999, 8 << 10))
        .await
        .expect("scheduling works again once space is back");
    seen.wait_until(Duration::from_secs(10), |d| d.contains_key(&999))
        .await;
    scheduler.shutdown().await.unwrap();

    let delivered = seen.numbers();
    acknowledged.insert(999);
    assert_eq!(
        delivered.keys().copied().collect::<BTreeSet<_>>(),
        acknowledged,
        "a refused task was delivered, or an acknowledged one was not"
    );
    seen.assert_never_early();
    for id in [slow, failing] {
        let info = store.get(id).await.unwrap().unwrap();
        assert_eq!(
            (info.state, info.attempts),
            (TaskState::Done, 2),
            "{info:?}"
        );
    }
    assert_eq!(
        store.get(after).await.unwrap().unwrap().state,
        TaskState::Done
    );
    let counts = store.counts().await.unwrap();
    assert_eq!(counts.done as usize, acknowledged.len(), "{counts:?}");
    drop(store);
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The deliveries in the scheduler process's log: `(number, attempt,
/// ran_ms, due_ms)`.
fn logged(path: &Path) -> Vec<(u32, u32, u64, u64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let f: Vec<u64> = line.split(' ').filter_map(|f| f.parse().ok()).collect();
            (f.len() == 4).then(|| (f[0] as u32, f[1] as u32, f[2], f[3]))
        })
        .collect()
}

/// Regression: once a full disk (under a scheduler in a process of its
/// own, default settings) had space again, delivery did not come back: 40 s
/// later 304 of 343 stored tasks were still scheduled, the process idle.
///
/// The scenario as an operations team met it: the store on an 8 MiB tmpfs;
/// 200 tasks due one every 20 ms from +2 s; at +1.5 s the tmpfs is filled
/// to its last byte, and 8 KiB tasks due 100 ms later are scheduled until
/// five are refused; at +4.5 s the filler is removed. Every task answered
/// `Ok` must be delivered, none early, and deliveries must resume within a
/// few seconds of the space returning.
///
/// A second cause of the same stall: once space returned, the write-ahead
/// log took it all (log 6.8 MB, database 1.6 MB, nothing free) before a
/// checkpoint had moved the log into the database file, and the checkpoint
/// then had no room to grow that file. The store now keeps a disk reserve
/// (`StoreBuilder::sqlite_disk_reserve`), and a checkpoint that meets a
/// full disk is finished in a write turn, with the reserve given up only
/// if that one meets it too. Before that fix this test failed 4 runs of 4.
#[test]
#[ignore = "mounts a tmpfs, so needs root; .ci/run runs it with --ignored"]
fn delivery_resumes_once_space_returns_to_a_scheduler_process() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(resumes_once_space_returns());
}

async fn resumes_once_space_returns() {
    let dir = temp_dir("resume_tmpfs");
    let fs = Tmpfs::mount(&dir.join("mnt"), "8m");
    let path = fs.0.join("tasks.db");
    let log = dir.join("deliveries.log");
    let client = Store::sqlite(&path).await.unwrap();
    let t0 = SystemTime::now();
    let start = tokio::time::Instant::now();
    let mut acknowledged: BTreeSet<u32> = BTreeSet::new();
    for n in 0..200u32 {
        let at = t0 + Duration::from_millis(2000 + 20 * u64::from(n));
        client.schedule(payload(n, 64)).at(at).await.unwrap();
        acknowledged.insert(n);
    }
    // The scheduler process: default settings, a handler that appends
    // `number attempt ran_ms due_ms` to the log (on another file system).
    let mut child = child::start(
        "disk-log",
        &[
            "--sqlite",
            path.to_str().unwrap(),
            "--log",
            log.to_str().unwrap(),
        ],
    )
    .await;

    tokio::time::sleep_until(start + Duration::from_millis(1500)).await;
    let filler = fs.fill();
    let (mut refused, mut n) = (0, 1000u32);
    while refused < 5 {
        match client
            .schedule(payload(n, 8 << 10))
            .delay(Duration::from_millis(100))
            .await
        {
            Ok(_) => {
                acknowledged.insert(n);
            }
            Err(err) => {
                assert!(err.is_disk_full(), "{err}");
                refused += 1;
            }
        }
        n += 1;
    }
    let accepted_full = acknowledged.len() - 200;
    tokio::time::sleep_until(start + Duration::from_millis(4500)).await;
    std::fs::remove_file(filler).unwrap();
    let freed = SystemTime::now();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let seen: BTreeSet<u32> = logged(&log).iter().map(|d| d.0).collect();
        if acknowledged.is_subset(&seen) {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            let counts = client.counts().await.unwrap();
            let _ = Command::new("ls").arg("-la").arg(&fs.0).status();
            let _ = Command::new("df").arg(&fs.0).status();
            panic!(
                "{} of {} acknowledged tasks delivered 30 s after space returned \
                 ({accepted_full} accepted on the full disk); store: {counts:?}",
                acknowledged.intersection(&seen).count(),
                acknowledged.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deliveries = logged(&log);
    let after: Vec<u64> = deliveries
        .iter()
        .map(|d| d.2)
        .filter(|&ran| ran >= millis(freed))
        .collect();
    println!(
        "{} deliveries of {} tasks ({accepted_full} accepted on the full disk); \
         first after space returned: +{} ms, last: +{} ms",
        deliveries.len(),
        acknowledged.len(),
        after.iter().min().map_or(0, |t| t - millis(freed)),
        after.iter().max().map_or(0, |t| t - millis(freed)),
    );
    for (n, attempt, ran, due) in &deliveries {
        assert!(ran >= due, "task {n} attempt {attempt} ran early");
        assert!(acknowledged.contains(n), "task {n} was refused yet ran");
    }
    let first = after.iter().min().copied().unwrap_or(0);
    assert!(
        first <= millis(freed) + 5_000,
        "the first delivery came {} ms after space returned",
        first - millis(freed)
    );
    child.kill().await.unwrap();
    drop(fs);
    std::fs::remove_dir_all(&dir).ok();
}
