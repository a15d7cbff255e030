//! Crash recovery with real processes: a node process is killed with
//! `SIGKILL` in the middle of a delivery, and the task must come back
//! without waiting for its lock (`callback_timeout + lock_grace`, an hour
//! here): at once when a restart on the same machine proves the process
//! gone, after the lease TTL when nothing can prove it (a node on another
//! machine).
//!
//! The node process is this test binary started again to run
//! [`child_node`] alone. The recovery times are printed (`--nocapture`);
//! the assertions are only that recovery happens well inside the hour.
#![cfg(target_os = "linux")]

#[path = "support/backends.rs"]
mod backends;

use std::process::Stdio;
use std::time::{Duration, Instant};

use backends::{Backend, Db};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::mpsc;
use ttw_durable::{AttemptOutcome, Scheduler, SchedulerBuilder, Store, TaskId, TaskState};

/// Longer than any test runs: a lock or lease this long never runs out.
const NEVER: Duration = Duration::from_secs(3600);

/// Default settings but for a lock that never runs out in a test, and the
/// given lease TTL.
fn builder(store: &Store, ttl: Duration) -> SchedulerBuilder {
    Scheduler::builder(store.clone())
        .callback_timeout(NEVER)
        .lease_ttl(ttl)
        .heartbeat(Duration::from_millis(200).min(ttl / 2))
}

/// A node process and its standard output.
struct Node {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Node {
    fn spawn(db: &Db, ttl: Duration) -> Node {
        Self::spawn_as(db, ttl, None)
    }

    /// A node process under node id `id` (default: a random one).
    fn spawn_as(db: &Db, ttl: Duration, id: Option<&str>) -> Node {
        let ttl_ms = ttl.as_millis().to_string();
        let mut child = Command::new(env!("CARGO_BIN_EXE_ttw-child"))
            .args(["crash-node", "--ttl-ms", &ttl_ms])
            .args(id.into_iter().flat_map(|id| ["--node-id", id]))
            .envs(db.env())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the node process");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Node { child, lines }
    }

    /// The rest of the first line starting with `prefix`.
    async fn wait_for(&mut self, prefix: &str) -> String {
        let find = async {
            while let Some(line) = self.lines.next_line().await.unwrap() {
                if let Some(rest) = line.strip_prefix(prefix) {
                    return rest.trim().to_string();
                }
            }
            panic!("the node process ended before printing {prefix:?}");
        };
        tokio::time::timeout(Duration::from_secs(60), find)
            .await
            .unwrap_or_else(|_| panic!("no {prefix:?} from the node process within 60 s"))
    }

    /// `SIGKILL`, and the process reaped.
    async fn kill(mut self) -> Instant {
        self.child.kill().await.expect("SIGKILL the node process");
        Instant::now()
    }
}

/// A scheduler in this process that reports each delivery's id and attempt.
async fn survivor(
    builder: SchedulerBuilder,
) -> (Scheduler, mpsc::UnboundedReceiver<(TaskId, u32)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let scheduler = builder
        .start(move |task| {
            let tx = tx.clone();
            async move {
                tx.send((task.id(), task.attempt())).ok();
                Ok::<_, String>(())
            }
        })
        .await
        .unwrap();
    (scheduler, rx)
}

/// The next delivery, within a minute (the lock and lease are an hour).
async fn redelivered(delivered: &mut mpsc::UnboundedReceiver<(TaskId, u32)>) -> (TaskId, u32) {
    tokio::time::timeout(Duration::from_secs(60), delivered.recv())
        .await
        .expect("the killed node's task comes back within a minute, not an hour")
        .expect("the scheduler is running")
}

/// Schedules one task due now and waits until the node process runs it.
async fn hang_one(store: &Store, node: &mut Node) -> TaskId {
    let id = store.schedule(b"hang".to_vec()).await.unwrap();
    // Not "STARTED" first: the task may run before the child prints it,
    // and `wait_for` passes over the lines before the one it looks for.
    let running: i64 = node.wait_for("RUNNING").await.parse().unwrap();
    assert_eq!(running, id.get());
    id
}

on_both! {
    /// Regression: a node killed mid-delivery and started again (with the
    /// default, random node id) waited out the dead session's lease TTL
    /// before it took any shard back, and the task the dead process was
    /// running came back only when its lock ran out (`callback_timeout +
    /// lock_grace`, 70 s by default). The new session now proves the old
    /// process gone (same machine), takes its shards at its first
    /// heartbeat, and takes the running task back with them.
    async fn a_restart_on_the_same_machine_recovers_at_once(db: Db) {
        let store = db.open().await;
        // Neither the lease nor the lock would ever run out.
        let mut node = Node::spawn(&db, NEVER);
        let id = hang_one(&store, &mut node).await;
        let killed = node.kill().await;

        let (restarted, mut delivered) = survivor(builder(&store, NEVER)).await;
        let started = killed.elapsed();
        let (got, attempt) = redelivered(&mut delivered).await;
        let recovered = killed.elapsed();
        assert_eq!((got, attempt), (id, 2));
        assert_eq!(restarted.stats().shards_owned, store.shards());
        assert_eq!(restarted.stats().reclaimed, 1);
        eprintln!("restart: scheduler up {started:?} after the kill, task delivered again {recovered:?} after it");
        restarted.shutdown().await.unwrap();
        let info = store.get(id).await.unwrap().unwrap();
        assert_eq!(info.state, TaskState::Done);
    }
}

on_both! {
    /// The attempt a SIGKILL cut short is kept: the task's history shows it
    /// `interrupted`, run by the killed node, started before the kill and
    /// ended when the survivor took the task back; then the redelivery,
    /// `done`, by the survivor.
    async fn the_attempt_a_kill_cut_short_stays_in_the_task_s_history(db: Db) {
        let store = db.open().await;
        let mut node = Node::spawn_as(&db, NEVER, Some("victim"));
        let before = std::time::SystemTime::now();
        let id = hang_one(&store, &mut node).await;
        let killed_at = std::time::SystemTime::now();
        node.kill().await;

        let (survivor, mut delivered) = survivor(builder(&store, NEVER).node_id("survivor")).await;
        assert_eq!(redelivered(&mut delivered).await, (id, 2));
        survivor.shutdown().await.unwrap();
        let attempts = store.attempts(id).await.unwrap();
        let seen: Vec<_> = attempts
            .iter()
            .map(|a| (a.attempt, a.outcome, a.node.as_deref()))
            .collect();
        assert_eq!(
            seen,
            [
                (1, AttemptOutcome::Interrupted, Some("victim")),
                (2, AttemptOutcome::Done, Some("survivor")),
            ],
            "{attempts:?}"
        );
        let cut = &attempts[0];
        let started = cut.started_at.expect("its start");
        assert!(started >= before - Duration::from_secs(1) && started <= killed_at);
        assert!(cut.ended_at.expect("its end") >= killed_at);
        assert!(cut.detail.as_deref().is_some_and(|d| d.contains("took it back")), "{cut:?}");
        assert!(attempts[1].ended_at.is_some());
    }
}

on_both! {
    /// Regression: a node that died mid-delivery and came back under the
    /// same node id took its shards back at once, but left the task it had
    /// been running until the task's lock ran out, though the new session
    /// of that node id proves the old one dead. Here the node runs as if on
    /// another machine (no process to check), so only the node id proves
    /// it.
    async fn a_restart_under_the_same_node_id_takes_the_running_task_back(db: Db) {
        let store = db.open().await;
        let mut node = Node::spawn_as(&db, NEVER, Some("worker-1"));
        let id = hang_one(&store, &mut node).await;
        db.exec("UPDATE ttw_nodes SET process = NULL").await;
        let killed = node.kill().await;

        let (restarted, mut delivered) = survivor(builder(&store, NEVER).node_id("worker-1")).await;
        let (got, attempt) = redelivered(&mut delivered).await;
        let recovered = killed.elapsed();
        assert_eq!((got, attempt), (id, 2));
        eprintln!("same node id, elsewhere: task delivered again {recovered:?} after the kill");
        restarted.shutdown().await.unwrap();
        let info = store.get(id).await.unwrap().unwrap();
        assert_eq!(info.state, TaskState::Done);
        let why = info.last_error.unwrap_or_default();
        assert!(why.contains("new owner took it back"), "{why}");
    }
}

on_both! {
    /// A node that is only silent (its process cannot be checked, its node
    /// id has not come back) loses its shards after the TTL, but the task
    /// it was running is left to its lock: the node may be alive and still
    /// running the handler, and a second delivery must not overlap it.
    async fn a_silent_node_s_running_task_waits_for_its_lock(db: Db) {
        let store = db.open().await;
        let ttl = Duration::from_secs(1);
        let mut node = Node::spawn(&db, ttl);
        let id = hang_one(&store, &mut node).await;
        db.exec("UPDATE ttw_nodes SET process = NULL").await;
        let killed = node.kill().await;

        let (survivor, mut delivered) = survivor(builder(&store, ttl).node_id("survivor")).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while survivor.stats().shards_owned < store.shards() {
            assert!(Instant::now() < deadline, "the shards were not taken within 30 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(survivor.stats().lease_takeovers > 0);
        eprintln!("silent node: shards taken {:?} after the kill", killed.elapsed());
        // Several heartbeats later the task is still the dead node's.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(delivered.try_recv().is_err(), "delivered again before its lock ran out");
        let info = store.get(id).await.unwrap().unwrap();
        assert_eq!(info.state, TaskState::Running);
        survivor.shutdown().await.unwrap();
    }
}

on_both! {
    /// The other side of proving a process gone: a live node process on
    /// the same machine is never judged gone. A second node shares the
    /// shards with it, taking only what it gives back, and its membership
    /// row stays.
    async fn a_live_process_on_the_same_machine_keeps_its_shards(db: Db) {
        let store = db.open().await;
        let mut node = Node::spawn(&db, NEVER);
        node.wait_for("STARTED").await;
        let (other, _delivered) = survivor(builder(&store, NEVER).node_id("other")).await;
        let half = store.shards() / 2;
        let deadline = Instant::now() + Duration::from_secs(30);
        while other.stats().shards_owned < half {
            assert!(Instant::now() < deadline, "the shards were not shared within 30 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Several more heartbeats of both, each looking at the other.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(other.stats().shards_owned, half);
        assert_eq!(other.stats().lease_takeovers, 0, "took a live node's shards");
        let members = db
            .query_i64("SELECT COUNT(*) FROM ttw_nodes WHERE node_id <> 'other'")
            .await;
        assert_eq!(members, 1, "the live node's membership was ended");
        other.shutdown().await.unwrap();
        node.kill().await;
    }
}
