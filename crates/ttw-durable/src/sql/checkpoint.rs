//! WAL checkpoints on SQLite, off the write path.
//!
//! Left to SQLite, a checkpoint runs inside the commit that takes the WAL
//! past 1,000 pages: that commit copies the pages into the database file
//! and syncs it before it returns, while this process's other writes wait
//! their turn (see [`Writes`](crate::sql::db::Writes)). The targets bench
//! showed it: once in a 13 s run, every task due within about 0.4 s
//! arrived up to 270 ms late, and p99 lateness at 1,000 tasks a second was
//! 15 - 25 ms; with automatic checkpoints off it was 4 - 8 ms (BENCHMARKS.md).
//! So the store's connections turn them off, and a task of the store's own
//! checkpoints on a connection of its own, beside the writes: `PASSIVE`,
//! which never waits for writers or readers. The end of a write wakes it;
//! it looks [`EVERY`] later, and every [`EVERY`] while writes go on, and
//! checkpoints when there were [`MANY`] writes since the last checkpoint,
//! or the WAL holds more than [`LARGE`] (read from the wal-index header,
//! without a statement), or 30 s have passed since a write; so an idle node
//! adds at most two statements a minute, and wakes twice for each write of
//! its heartbeat.
//!
//! A checkpoint first syncs the frames written since the last one, and that
//! sync is what a busy store's commits feel: at 1,100 tasks a second, about
//! 40 MB of frames a second. Synced once a second, it took 160 - 280 ms,
//! and the tasks due meanwhile were claimed up to 30 ms late (p99 16 - 31 ms
//! in the peers bench's precision scenario). Synced every 100 ms, it takes
//! 10 - 30 ms, and p99 stays under 10 ms (BENCHMARKS.md).
//!
//! SQLite starts the WAL over only after a checkpoint has copied all of it,
//! and under a steady stream of writes a checkpoint beside them never does:
//! frames arrive while it copies. The WAL then grew for as long as the
//! writes went on (480 MB in a 12 s run). So once the WAL holds more than
//! [`RESTART_PAST`], checkpoints beside the writes go on, each shorter than
//! the last, and then one runs inside a write turn, where no write of this
//! process adds frames: it copies the rest in a few milliseconds, and the
//! next write starts the WAL over (unless a reader still in the WAL, or a
//! writer in another process, prevented it: a later look tries again). The
//! file is cut back only past [`WAL_LIMIT`] (`journal_size_limit`), above
//! what the WAL reaches this way: cutting the file at each start over, then
//! growing it again, made the commits just after wait up to 120 ms.
//!
//! Once a checkpoint meets a full disk, the checkpointer watches the space
//! until the database file has room to take in the whole WAL, counting the
//! store's disk reserve (see [`reserve`](crate::sql::reserve)), then
//! finishes a `TRUNCATE` checkpoint inside a write turn: it copies the
//! whole WAL and cuts its file to nothing. The reserve, if it was given up
//! for that, is taken back at a later look once the disk has room.
//!
//! The WAL's size is read from the WAL file's own frame headers, never from
//! the `-shm` file: closing a descriptor of a file drops every POSIX lock
//! the process holds on it, SQLite's among them (see `sql::wal`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::SqlitePool;
use tokio::sync::{Mutex, Notify};
use tokio::task::JoinHandle;

use crate::sql::reserve::Reserve;
use crate::sql::wal::{beside, growth, wal_bytes};

/// How long after a write the checkpointer looks, and how often while
/// writes go on.
const EVERY: Duration = Duration::from_millis(100);
/// Writes since the last checkpoint that make the next look checkpoint.
const MANY: u64 = 64;
/// How long after a write a checkpoint comes at the latest.
const AT_LEAST_EVERY: Duration = Duration::from_secs(30);
/// The WAL's content past which a look after any write checkpoints.
const LARGE: u64 = 4 << 20;
/// The WAL's content past which a checkpoint is finished inside a write
/// turn, so that the WAL starts over.
const RESTART_PAST: u64 = 32 << 20;
/// Bytes in a WAL frame: a page and its 24-byte header.
const FRAME: u64 = 4096 + 24;
/// What SQLite cuts the WAL file back to when it starts it over
/// (`journal_size_limit`).
pub(crate) const WAL_LIMIT: u64 = 64 << 20;
/// A checkpoint beside the writes this short leaves few frames for the
/// one inside a write turn.
const SHORT: Duration = Duration::from_millis(5);
/// Checkpoints beside the writes in one look, at most, waiting for a short
/// one.
const BESIDE: usize = 3;

/// A store's checkpointer: counts its writes, and stops when the last
/// clone of the store is dropped.
pub(crate) struct Checkpointer {
    writes: Arc<WriteCount>,
    task: JoinHandle<()>,
    /// What a write needs to finish a checkpoint after a full disk itself
    /// ([`before_write`](Self::before_write)).
    pool: SqlitePool,
    db: PathBuf,
    wal: PathBuf,
    reserve: Reserve,
}

/// The writes counted, and the checkpointer's wake-up at a write.
#[derive(Default)]
struct WriteCount {
    count: AtomicU64,
    wrote: Notify,
    /// Whether a checkpoint met a full disk and waits for room
    /// ([`after_full_disk`]); a write that finds the room first finishes it
    /// ([`Checkpointer::before_write`]).
    recovering: AtomicBool,
    /// The space free when a try at that checkpoint that looked as if it
    /// fitted failed ([`NEVER`] before one did): the next try waits for
    /// more, or (the checkpointer's) for [`FULL_TRY_EVERY`]; on a file
    /// system whose estimate is off, copy-on-write ones, a try every 5 ms
    /// would hold the write turn nearly all the time.
    failed_at_free: AtomicU64,
    /// Checkpoints still to fail by fault injection (feature
    /// `test-faults`).
    #[cfg(feature = "test-faults")]
    failing: AtomicU64,
}

impl WriteCount {
    /// Whether this checkpoint statement is to fail by fault injection.
    fn fail_checkpoint(&self) -> bool {
        #[cfg(feature = "test-faults")]
        {
            self.failing
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        }
        #[cfg(not(feature = "test-faults"))]
        false
    }
}

impl Checkpointer {
    /// Starts checkpointing `pool`'s database, the file at `path`; `turn`
    /// is this process's turn at the writer (see
    /// [`Writes`](crate::sql::db::Writes)), taken to finish a checkpoint.
    /// `reserve` is the disk reserve beside the file, taken now if the
    /// disk has room.
    pub(crate) fn start(
        pool: SqlitePool,
        path: &Path,
        turn: Arc<Mutex<()>>,
        reserve: Reserve,
    ) -> Checkpointer {
        Checkpointer::restarting_past(pool, path, turn, RESTART_PAST, reserve)
    }

    /// As [`start`](Self::start), starting the WAL over once it holds more
    /// than `restart_past` bytes.
    fn restarting_past(
        pool: SqlitePool,
        path: &Path,
        turn: Arc<Mutex<()>>,
        restart_past: u64,
        reserve: Reserve,
    ) -> Checkpointer {
        reserve.take();
        let writes = Arc::new(WriteCount::default());
        let wal = beside(path, "-wal");
        let task = tokio::spawn(run(
            pool.clone(),
            wal.clone(),
            writes.clone(),
            turn,
            restart_past,
            reserve.clone(),
        ));
        Checkpointer {
            writes,
            task,
            pool,
            db: path.to_path_buf(),
            wal,
            reserve,
        }
    }

    /// Called by a write in its turn, before it writes: after a checkpoint
    /// met a full disk, if the room that checkpoint needs is there now,
    /// finishes it here (a `TRUNCATE`, the reserve given up if its room is
    /// needed), so that this write, and the backlog behind it, do not take
    /// the room first. Nothing otherwise, and at once while the disk is
    /// fine.
    ///
    /// The checkpointer looks for the room every 5 ms, and that was not
    /// always first: one run in a few, a scheduler process's backlog of
    /// claims and outcomes grew the WAL into the space freed before its
    /// next look, and delivery stalled with the room gone for good.
    pub(crate) async fn before_write(&self) {
        if !self.writes.recovering.load(Ordering::Acquire) {
            return;
        }
        let need = growth(&self.db, &self.wal);
        if room_now(&self.reserve, need, &self.writes) {
            let _ = truncate_in_turn(&self.pool, &self.writes, &self.reserve, need).await;
        }
    }

    /// One more write ended (committed, or tried).
    pub(crate) fn wrote(&self) {
        self.writes.count.fetch_add(1, Ordering::Relaxed);
        self.writes.wrote.notify_one();
    }

    /// Makes the next `n` checkpoint statements fail (feature
    /// `test-faults`), as a full disk makes them.
    #[cfg(feature = "test-faults")]
    pub(crate) fn fail_checkpoints(&self, n: u64) {
        self.writes.failing.store(n, Ordering::SeqCst);
    }

    /// How many of the checkpoint failures asked for are still to come.
    #[cfg(feature = "test-faults")]
    pub(crate) fn checkpoint_failures_left(&self) -> u64 {
        self.writes.failing.load(Ordering::SeqCst)
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Checkpoints while writes go on: woken by a write, it looks [`EVERY`]
/// later, and again every [`EVERY`] while the writes go on, so an idle node
/// wakes twice for each write of its heartbeat, not ten times a second.
async fn run(
    pool: SqlitePool,
    wal: PathBuf,
    writes: Arc<WriteCount>,
    turn: Arc<Mutex<()>>,
    restart_past: u64,
    reserve: Reserve,
) {
    let large = || wal_bytes(&wal) > LARGE;
    let db = wal.with_file_name(
        wal.file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix("-wal"))
            .unwrap_or_default(),
    );
    // Writes counted at the last checkpoint, and at the last look.
    let (mut done, mut seen) = (0, 0);
    let mut last = tokio::time::Instant::now();
    loop {
        if writes.count.load(Ordering::Relaxed) == seen {
            // No write since the last look: wait for one, or for the
            // longest a write may wait for its checkpoint.
            let latest = last + AT_LEAST_EVERY;
            tokio::select! {
                _ = writes.wrote.notified() => {}
                _ = tokio::time::sleep_until(latest), if seen != done => {}
            }
        }
        tokio::time::sleep(EVERY).await;
        // A reserve given up (here or by another process on the same
        // database) is taken back at the first look with room for it,
        // before this process's writes take that room.
        reserve.take();
        let now = writes.count.load(Ordering::Relaxed);
        seen = now;
        let since = now - done;
        if since == 0 || (since < MANY && last.elapsed() < AT_LEAST_EVERY && !large()) {
            continue;
        }
        (done, last) = (now, tokio::time::Instant::now());
        // A busy database: the next look tries again, and SQLite
        // checkpoints when the last connection closes. A full disk: finish
        // in a write turn, with the reserve's room if need be.
        match checkpoint(&pool, &turn, restart_past, &writes).await {
            Ok(()) => {}
            Err(err) if crate::error::disk_full(&err) => {
                after_full_disk(&pool, &turn, &writes, &reserve, || growth(&db, &wal)).await;
            }
            Err(err) => tracing::debug!(error = %err, "WAL checkpoint failed"),
        }
    }
}

/// How often the space is looked at while a checkpoint waits for room.
const ROOM_EVERY: Duration = Duration::from_millis(5);
/// How often a checkpoint is tried while the disk is full, whatever the
/// space looks like.
const FULL_TRY_EVERY: Duration = Duration::from_secs(1);

/// After a checkpoint met a full disk: waits for the room the database
/// file needs to take in the WAL (`growth`, in bytes), looking at the
/// space every [`ROOM_EVERY`]; once it is there, counting the reserve's,
/// takes a write turn, so that no write of this process takes the room
/// meanwhile, gives the reserve up if its room is needed, and copies the
/// whole WAL into the database file, cutting the WAL's file to nothing.
/// Returns once such a checkpoint has run (or failed for another reason).
///
/// Watching matters: once space returned, this process's first writes
/// (a backlog of claims and outcomes) grew the WAL into it within a few
/// milliseconds, before the next look of the checkpointer, and the
/// checkpoint that would start the WAL over never had room again. Writes
/// while the disk is full are few (a failed claim is tried again 500 ms
/// later), so a look every 5 ms mostly comes first; and each write of this
/// process looks too, in its turn, before it writes
/// ([`Checkpointer::before_write`]), so none takes the room first.
async fn after_full_disk(
    pool: &SqlitePool,
    turn: &Mutex<()>,
    writes: &WriteCount,
    reserve: &Reserve,
    growth: impl Fn() -> Option<u64>,
) {
    let mut last_try = tokio::time::Instant::now();
    writes.failed_at_free.store(NEVER, Ordering::Release);
    writes.recovering.store(true, Ordering::Release);
    let _recovered = Recovering(writes);
    loop {
        tokio::time::sleep(ROOM_EVERY).await;
        // A write found the room first and finished the checkpoint.
        if !writes.recovering.load(Ordering::Acquire) {
            return;
        }
        if !room_now(reserve, growth(), writes) && last_try.elapsed() < FULL_TRY_EVERY {
            continue;
        }
        last_try = tokio::time::Instant::now();
        let _turn = turn.lock().await;
        if !writes.recovering.load(Ordering::Acquire) {
            return;
        }
        // Looked at again in the turn: no write of this process runs now.
        match truncate_in_turn(pool, writes, reserve, growth()).await {
            Ok(true) => return,
            // A reader kept it from finishing: the WAL did not start over,
            // so keep watching (its next writes would take the room).
            Ok(false) => {
                tracing::debug!("WAL checkpoint on a full disk kept from finishing by a reader");
            }
            Err(err) if crate::error::disk_full(&err) => {
                tracing::debug!(error = %err, "WAL checkpoint on a full disk failed");
            }
            Err(err) => {
                tracing::debug!(error = %err, "WAL checkpoint failed");
                return;
            }
        }
    }
}

/// No try at the checkpoint after a full disk has failed yet.
const NEVER: u64 = u64::MAX;

/// Whether the room that checkpoint needs (`need` bytes) is there now,
/// counting the reserve's, and more space than at the last try that failed.
fn room_now(reserve: &Reserve, need: Option<u64>, writes: &WriteCount) -> bool {
    let free = reserve.free();
    let held = if reserve.held() { reserve.size() } else { 0 };
    let failed = writes.failed_at_free.load(Ordering::Acquire);
    need.is_some_and(|need| need <= free.saturating_add(held)) && (failed == NEVER || free > failed)
}

/// In this process's write turn: gives the reserve up if its room is what
/// the checkpoint needs (`need` bytes), and copies the whole WAL into the
/// database file, cutting the WAL's file to nothing. Done, the wait for
/// room is over; not done, the space free is kept for [`room_now`].
async fn truncate_in_turn(
    pool: &SqlitePool,
    writes: &WriteCount,
    reserve: &Reserve,
    need: Option<u64>,
) -> Result<bool, sqlx::Error> {
    let free = reserve.free();
    if reserve.held()
        && need.is_some_and(|need| need > free && need <= free.saturating_add(reserve.size()))
    {
        reserve.give_up();
    }
    let done = truncate(pool, writes).await;
    match &done {
        Ok(true) => writes.recovering.store(false, Ordering::Release),
        Ok(false) => writes
            .failed_at_free
            .store(reserve.free(), Ordering::Release),
        Err(err) if crate::error::disk_full(err) => {
            writes
                .failed_at_free
                .store(reserve.free(), Ordering::Release);
        }
        Err(_) => {}
    }
    done
}

/// Marks the end of [`after_full_disk`] however it ends.
struct Recovering<'a>(&'a WriteCount);

impl Drop for Recovering<'_> {
    fn drop(&mut self) {
        self.0.recovering.store(false, Ordering::Release);
    }
}

/// Copies the WAL into the database file beside the writes; if it holds
/// more than `restart_past` bytes, finishes inside a write turn once what
/// is left for it there is little: the last checkpoint beside the writes
/// was short and copied all it saw. (A reader holding an older view of the
/// database stops a checkpoint short of the frames it may need; one such
/// left 170 ms of copying to the write turn.) Past twice `restart_past` it
/// finishes in the turn whatever is left, so that the WAL stays bounded.
async fn checkpoint(
    pool: &SqlitePool,
    turn: &Mutex<()>,
    restart_past: u64,
    writes: &WriteCount,
) -> Result<(), sqlx::Error> {
    let mut little_left = false;
    let mut wal = Wal {
        frames: 0,
        copied: 0,
        busy: false,
    };
    for _ in 0..BESIDE {
        let started = tokio::time::Instant::now();
        wal = passive(pool, writes).await?;
        little_left = started.elapsed() < SHORT && wal.copied >= wal.frames;
        if little_left || wal.bytes() <= restart_past {
            break;
        }
    }
    if wal.bytes() > restart_past && (little_left || wal.bytes() > 2 * restart_past) {
        let _turn = turn.lock().await;
        passive(pool, writes).await?;
    }
    Ok(())
}

/// What a checkpoint saw: the frames in the WAL, and how many of them are
/// in the database file now.
struct Wal {
    frames: u64,
    copied: u64,
    /// The checkpoint could not finish for readers or writers it waited
    /// for (SQLite answers that with a row, not an error).
    busy: bool,
}

impl Wal {
    /// The WAL's content, in bytes.
    fn bytes(&self) -> u64 {
        self.frames.saturating_mul(FRAME)
    }
}

/// One `PASSIVE` checkpoint.
async fn passive(pool: &SqlitePool, writes: &WriteCount) -> Result<Wal, sqlx::Error> {
    run_checkpoint(pool, writes, "PRAGMA wal_checkpoint(PASSIVE)").await
}

/// One `TRUNCATE` checkpoint: it waits for this database's other writers
/// and readers (the busy timeout), copies the whole WAL, and cuts its file
/// to nothing. Answers whether it did: `false` if a reader or writer it
/// waited for kept it from finishing.
async fn truncate(pool: &SqlitePool, writes: &WriteCount) -> Result<bool, sqlx::Error> {
    run_checkpoint(pool, writes, "PRAGMA wal_checkpoint(TRUNCATE)")
        .await
        .map(|wal| !wal.busy)
}

/// One checkpoint statement.
async fn run_checkpoint(
    pool: &SqlitePool,
    writes: &WriteCount,
    statement: &'static str,
) -> Result<Wal, sqlx::Error> {
    if writes.fail_checkpoint() {
        return Err(sqlx::Error::Io(std::io::Error::other(
            "a checkpoint failed by fault injection",
        )));
    }
    // Read to its end (see the notes of `db`).
    let rows: Vec<(i64, i64, i64)> = sqlx::query_as(statement).fetch_all(pool).await?;
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(rows.first().map_or(
        Wal {
            frames: 0,
            copied: 0,
            busy: false,
        },
        |&(busy, frames, copied)| Wal {
            frames: count(frames),
            copied: count(copied),
            busy: busy != 0,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::db::PoolSettings;

    /// Under a steady stream of writes the WAL never started over: each
    /// checkpoint ran beside the writes, frames arrived while it copied,
    /// so none copied all of it, and the WAL file grew for as long as the
    /// writes went on (480 MB in a 12 s run at 1,100 tasks a second). Here
    /// a writer commits without pause, taking the write turn as the store's
    /// writes do, and the WAL file must stay near the restart size (1 MiB)
    /// while 40 MiB of frames are written.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_wal_starts_over_under_steady_writes() {
        const PAST: u64 = 1 << 20;
        let dir = std::env::temp_dir().join(format!("ttw-wal-restart-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("wal.db");
        let open = PoolSettings::default().sqlite(&path).await.unwrap();
        let crate::sql::db::Db::Sqlite(pool, _) = open.db else {
            unreachable!("a file opens on SQLite")
        };
        sqlx::query("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB)")
            .execute(&pool)
            .await
            .unwrap();
        let turn = Arc::new(Mutex::new(()));
        let wal = dir.join("wal.db-wal");
        let checkpointer = Checkpointer::restarting_past(
            pool.clone(),
            &path,
            turn.clone(),
            PAST,
            Reserve::beside(&path, Some(0)),
        );
        let (mut written, mut largest) = (0u64, 0u64);
        // 40 MiB of frames, or as much as 30 s allows on a slow machine, at
        // most 20 MiB a second: the rate of a busy store (1,100 tasks a
        // second wrote 40 MB of frames a second). Unpaced, a fast disk took
        // 80 MiB a second, 8 MiB between two of the checkpointer's looks.
        let started = tokio::time::Instant::now();
        let until = started + Duration::from_secs(30);
        let mut id = 0i64;
        while written < 40 * PAST && tokio::time::Instant::now() < until {
            let due = started + Duration::from_secs_f64(written as f64 / (20 * PAST) as f64);
            tokio::time::sleep_until(due).await;
            let _turn = turn.lock().await;
            // Four pages a commit, over and over the same rows.
            id = (id + 1) % 64;
            sqlx::query("INSERT OR REPLACE INTO t (id, body) VALUES ($1, zeroblob(12000))")
                .bind(id)
                .execute(&pool)
                .await
                .unwrap();
            checkpointer.wrote();
            written += 4 * FRAME;
            largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
        }
        drop(checkpointer);
        pool.close().await;
        let _ = std::fs::remove_dir_all(&dir);
        assert!(written >= 40 * PAST, "only {written} bytes were written");
        assert!(
            largest < 12 * PAST,
            "the WAL file reached {largest} bytes while {written} were written"
        );
    }

    /// A database on SQLite in a fresh directory, its pool and its path.
    async fn open(name: &str) -> (std::path::PathBuf, std::path::PathBuf, SqlitePool) {
        let dir = std::env::temp_dir().join(format!("ttw-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("wal.db");
        let open = PoolSettings {
            sqlite_disk_reserve: Some(0),
            ..PoolSettings::default()
        }
        .sqlite(&path)
        .await
        .unwrap();
        let crate::sql::db::Db::Sqlite(pool, _) = open.db else {
            unreachable!("a file opens on SQLite")
        };
        sqlx::query("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB)")
            .execute(&pool)
            .await
            .unwrap();
        (dir, path, pool)
    }

    /// SQLite's own count of the WAL's frames (`mxFrame`), from a
    /// `PASSIVE` checkpoint.
    async fn frames_by_sqlite(pool: &SqlitePool) -> u64 {
        passive(pool, &WriteCount::default()).await.unwrap().frames
    }

    /// The frames read from the WAL file's headers are SQLite's own count,
    /// also after the WAL has started over inside a file that kept its size;
    /// the last commit frame tells how much the database file will grow.
    #[tokio::test]
    async fn the_wal_frames_are_counted_from_the_wal_file() {
        let (dir, path, pool) = open("wal-frames").await;
        let wal = beside(&path, "-wal");
        for id in 0..40 {
            sqlx::query("INSERT OR REPLACE INTO t (id, body) VALUES ($1, zeroblob(9000))")
                .bind(id)
                .execute(&pool)
                .await
                .unwrap();
        }
        // The database file grows by what the 40 rows take once the WAL is
        // copied into it, and not at all after.
        let before = growth(&path, &wal).unwrap();
        assert!(before >= 40 * 9000, "the database grows by {before} bytes");
        let frames = frames_by_sqlite(&pool).await;
        assert!(frames > 100, "{frames} frames");
        assert_eq!(growth(&path, &wal), Some(0));
        assert_eq!(wal_bytes(&wal), frames * FRAME);
        // Everything is copied now: the next commit starts the WAL over at
        // its first frame, and the file keeps its size.
        let len = std::fs::metadata(&wal).unwrap().len();
        sqlx::query("INSERT OR REPLACE INTO t (id, body) VALUES (1, x'00')")
            .execute(&pool)
            .await
            .unwrap();
        let after = frames_by_sqlite(&pool).await;
        assert!(after < 10, "{after} frames after the restart");
        assert_eq!(std::fs::metadata(&wal).unwrap().len(), len);
        assert_eq!(wal_bytes(&wal), after * FRAME);
        pool.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Regression: the checkpointer read the WAL's size from the `-shm`
    /// file's header by opening and closing that file, and closing a
    /// descriptor drops every POSIX lock the process holds on the file,
    /// SQLite's among them. Another process then took the wal-index for
    /// unused and cut it back while this one had it mapped (processes
    /// crashed with SIGBUS in `walFindFrame`), and readers' locks no longer
    /// kept the WAL from starting over under them.
    ///
    /// Here a checkpointer looks at the WAL after a write, and another
    /// process (Python's `fcntl`) asks whether this one still holds its
    /// read lock on the wal-index's dead-man-switch byte (128), which
    /// SQLite holds while a connection has the wal-index open.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_store_on_sqlite_keeps_its_locks_on_the_wal_index() {
        let (dir, path, pool) = open("wal-locks").await;
        let shm = beside(&path, "-shm");
        let holder = || {
            let out = std::process::Command::new("python3")
                .arg("-c")
                .arg(
                    "import fcntl, os, struct, sys\n\
                     fd = os.open(sys.argv[1], os.O_RDWR)\n\
                     f = 'hhqqi4x'\n\
                     got = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack(f, fcntl.F_WRLCK, 0, 128, 1, 0))\n\
                     kind, _, _, _, pid = struct.unpack(f, got)\n\
                     print('unlocked' if kind == fcntl.F_UNLCK else pid)\n",
                )
                .arg(&shm)
                .output()
                .expect("python3 runs");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        let me = std::process::id().to_string();
        assert_eq!(
            holder(),
            me,
            "SQLite holds the lock before the checkpointer looks"
        );
        let turn = Arc::new(Mutex::new(()));
        let checkpointer = Checkpointer::start(
            pool.clone(),
            &path,
            turn.clone(),
            Reserve::beside(&path, Some(0)),
        );
        for id in 0..3 {
            sqlx::query("INSERT INTO t (id, body) VALUES ($1, zeroblob(100))")
                .bind(id)
                .execute(&pool)
                .await
                .unwrap();
            checkpointer.wrote();
            // The checkpointer looks at the WAL 100 ms after a write.
            tokio::time::sleep(EVERY * 3).await;
        }
        assert_eq!(holder(), me, "this process lost its lock on the wal-index");
        drop(checkpointer);
        pool.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}
