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

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::SqlitePool;
use tokio::sync::{Mutex, Notify};
use tokio::task::JoinHandle;

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
}

/// The writes counted, and the checkpointer's wake-up at a write.
#[derive(Default)]
struct WriteCount {
    count: AtomicU64,
    wrote: Notify,
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
    pub(crate) fn start(pool: SqlitePool, path: &Path, turn: Arc<Mutex<()>>) -> Checkpointer {
        Checkpointer::restarting_past(pool, path, turn, RESTART_PAST)
    }

    /// As [`start`](Self::start), starting the WAL over once it holds more
    /// than `restart_past` bytes.
    fn restarting_past(
        pool: SqlitePool,
        path: &Path,
        turn: Arc<Mutex<()>>,
        restart_past: u64,
    ) -> Checkpointer {
        let writes = Arc::new(WriteCount::default());
        let files = (beside(path, "-wal"), beside(path, "-shm"));
        let task = tokio::spawn(run(pool, files, writes.clone(), turn, restart_past));
        Checkpointer { writes, task }
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
    (wal, shm): (PathBuf, PathBuf),
    writes: Arc<WriteCount>,
    turn: Arc<Mutex<()>>,
    restart_past: u64,
) {
    let large = || match wal_frames(&shm) {
        Some(frames) => frames.saturating_mul(FRAME) > LARGE,
        None => std::fs::metadata(&wal).is_ok_and(|m| m.len() > LARGE),
    };
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
        let now = writes.count.load(Ordering::Relaxed);
        seen = now;
        let since = now - done;
        if since == 0 || (since < MANY && last.elapsed() < AT_LEAST_EVERY && !large()) {
            continue;
        }
        (done, last) = (now, tokio::time::Instant::now());
        // A busy database, a full disk: the next look tries again, and
        // SQLite checkpoints when the last connection closes.
        if let Err(err) = checkpoint(&pool, &turn, restart_past, &writes).await {
            tracing::debug!(error = %err, "WAL checkpoint failed");
        }
    }
}

/// `path` with `suffix` after its file name (`-wal`, `-shm`).
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    name.into()
}

/// The frames in the WAL now, without a statement: `mxFrame` of the
/// wal-index header, a 32-bit integer in the machine's byte order at byte
/// 16 of the `-shm` file (SQLite's "WAL-mode File Format", the wal-index
/// header). The size of the WAL file does not tell: it keeps its size when
/// the WAL starts over. `None` if the header cannot be read or is not set
/// up yet.
fn wal_frames(shm: &Path) -> Option<u64> {
    let mut header = [0u8; 20];
    std::fs::File::open(shm)
        .ok()?
        .read_exact(&mut header)
        .ok()?;
    // `isInit`.
    if header[12] != 1 {
        return None;
    }
    let mx_frame: [u8; 4] = header[16..20].try_into().ok()?;
    Some(u64::from(u32::from_ne_bytes(mx_frame)))
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
}

impl Wal {
    /// The WAL's content, in bytes.
    fn bytes(&self) -> u64 {
        self.frames.saturating_mul(FRAME)
    }
}

/// One `PASSIVE` checkpoint.
async fn passive(pool: &SqlitePool, writes: &WriteCount) -> Result<Wal, sqlx::Error> {
    if writes.fail_checkpoint() {
        return Err(sqlx::Error::Io(std::io::Error::other(
            "a checkpoint failed by fault injection",
        )));
    }
    // Read to its end (see the notes of `db`).
    let rows: Vec<(i64, i64, i64)> = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
        .fetch_all(pool)
        .await?;
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(rows.first().map_or(
        Wal {
            frames: 0,
            copied: 0,
        },
        |&(_, frames, copied)| Wal {
            frames: count(frames),
            copied: count(copied),
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
        let checkpointer = Checkpointer::restarting_past(pool.clone(), &path, turn.clone(), PAST);
        let (mut written, mut largest) = (0u64, 0u64);
        // 40 MiB of frames, or as much as 30 s allows on a slow machine.
        let until = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut id = 0i64;
        while written < 40 * PAST && tokio::time::Instant::now() < until {
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
}
