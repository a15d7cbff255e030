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
//! checkpoints on a connection of its own, outside the write turns:
//! `PASSIVE`, which never waits for writers or readers. It looks once a
//! second and checkpoints when there were writes since the last checkpoint
//! and the WAL file is over [`WAL_LIMIT`], or the writes were many, or 30 s
//! have passed; so an idle node adds at most two statements a minute.
//! SQLite starts the WAL over once a checkpoint has copied all of it, and
//! cuts the file back to [`WAL_LIMIT`] then (`journal_size_limit`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::SqlitePool;
use tokio::task::JoinHandle;

/// How often the checkpointer looks.
const EVERY: Duration = Duration::from_secs(1);
/// Writes since the last checkpoint that make the next look checkpoint.
const MANY: u64 = 64;
/// Looks after which any write since the last checkpoint makes one.
const AT_LEAST_EVERY: u32 = 30;
/// The WAL file's size past which a look with writes checkpoints, and
/// which SQLite cuts the file back to when it starts it over.
pub(crate) const WAL_LIMIT: u64 = 4 << 20;

/// A store's checkpointer: counts its writes, and stops when the last
/// clone of the store is dropped.
pub(crate) struct Checkpointer {
    writes: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl Checkpointer {
    /// Starts checkpointing `pool`'s database.
    pub(crate) fn start(pool: SqlitePool, wal: PathBuf) -> Checkpointer {
        let writes = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(run(pool, wal, writes.clone()));
        Checkpointer { writes, task }
    }

    /// One more write committed (or tried).
    pub(crate) fn wrote(&self) {
        self.writes.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run(pool: SqlitePool, wal: PathBuf, writes: Arc<AtomicU64>) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut done, mut looks) = (0, 0);
    loop {
        tick.tick().await;
        looks += 1;
        let now = writes.load(Ordering::Relaxed);
        let since = now - done;
        let large = || std::fs::metadata(&wal).is_ok_and(|m| m.len() > WAL_LIMIT);
        if since == 0 || (since < MANY && looks < AT_LEAST_EVERY && !large()) {
            continue;
        }
        (done, looks) = (now, 0);
        // A busy database, a full disk: the next look tries again, and
        // SQLite checkpoints when the last connection closes.
        if let Err(err) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
            .execute(&pool)
            .await
        {
            tracing::debug!(error = %err, "WAL checkpoint failed");
        }
    }
}
