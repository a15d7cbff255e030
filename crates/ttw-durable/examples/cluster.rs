//! Three nodes share one task store; one is killed half-way and the others
//! take its shards.
//!
//! ```text
//! cargo run --release -p ttw-durable --example cluster
//! cargo run --release -p ttw-durable --example cluster -- --postgres postgres://postgres@127.0.0.1:55432/postgres
//! ```
//!
//! On SQLite (the default) each node runs on a thread of its own with its
//! own runtime and pool, and the kill shuts that runtime down mid-flight. With
//! `--postgres URL` each node is a separate OS process (this program started
//! again with `--worker`), and the kill is `SIGKILL`.
//!
//! Options: `--tasks N` (default 6000), `--over SECS` (spread, default 12),
//! `--nodes N` (default 3), `--no-kill`, `--shards N` (default 64).
//! It prints a line per node every second and a summary: delivered,
//! duplicates, lost (must be 0), takeover time and lateness.

// A measurement, not the task system: it reads the system's clock
// directly (the library reads it only through its clock; see clippy.toml).
#![allow(clippy::disallowed_methods)]

#[path = "support/percentile.rs"]
mod percentile;

use percentile::percentile;
use std::collections::HashMap;
use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;
use ttw_durable::{Scheduler, Store, StoreBuilder};

const HEARTBEAT: Duration = Duration::from_millis(500);
const TTL: Duration = Duration::from_secs(3);

#[derive(Debug, Clone)]
struct Options {
    postgres: Option<String>,
    schema: String,
    sqlite: std::path::PathBuf,
    tasks: u64,
    over: f64,
    nodes: usize,
    kill: bool,
    shards: u32,
}

/// What a node tells the coordinator.
#[derive(Debug)]
enum Event {
    /// Task `task` started on `node`, `late_ms` after its time.
    Delivered {
        node: usize,
        task: i64,
        late_ms: f64,
    },
    /// Node `node` holds `shards` shards.
    Shards { node: usize, shards: u32 },
}

fn parse() -> (Options, Option<usize>) {
    let mut args = std::env::args().skip(1);
    let mut o = Options {
        postgres: None,
        schema: format!("cluster_demo_{}", std::process::id()),
        sqlite: std::env::temp_dir()
            .join(format!("ttw-cluster-{}", std::process::id()))
            .join("tasks.db"),
        tasks: 6000,
        over: 12.0,
        nodes: 3,
        kill: true,
        shards: 64,
    };
    let mut worker = None;
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--postgres" => o.postgres = Some(value()),
            "--schema" => o.schema = value(),
            "--tasks" => o.tasks = value().parse().expect("--tasks N"),
            "--over" => o.over = value().parse().expect("--over SECS"),
            "--nodes" => o.nodes = value().parse().expect("--nodes N"),
            "--shards" => o.shards = value().parse().expect("--shards N"),
            "--no-kill" => o.kill = false,
            "--worker" => worker = Some(value().parse().expect("--worker INDEX")),
            other => panic!("unknown argument {other}"),
        }
    }
    (o, worker)
}

async fn open(o: &Options) -> Store {
    let builder = StoreBuilder::default().shards(o.shards).max_connections(8);
    match &o.postgres {
        Some(url) => {
            builder
                .postgres_schema(o.schema.clone())
                .postgres(url)
                .await
        }
        None => builder.sqlite(&o.sqlite).await,
    }
    .expect("open the store")
}

/// Runs node `index` until its task is aborted, sending events.
async fn run_node(o: Options, index: usize, events: mpsc::UnboundedSender<Event>) {
    let store = open(&o).await;
    let tx = events.clone();
    let scheduler = Scheduler::builder(store)
        .node_id(format!("node-{index}"))
        .window(Duration::from_secs(10))
        .heartbeat(HEARTBEAT)
        .lease_ttl(TTL)
        .callback_timeout(Duration::from_secs(2))
        .lock_grace(Duration::from_millis(500))
        .catch_up_interval(Duration::from_millis(500))
        .start(move |task| {
            let tx = tx.clone();
            async move {
                let late = SystemTime::now()
                    .duration_since(task.run_at())
                    .unwrap_or_default();
                // A little work, so a kill catches some tasks in flight.
                tokio::time::sleep(Duration::from_millis(2)).await;
                let _ = tx.send(Event::Delivered {
                    node: index,
                    task: task.id().get(),
                    late_ms: late.as_secs_f64() * 1e3,
                });
                Ok::<_, String>(())
            }
        })
        .await
        .expect("start the scheduler");
    loop {
        let _ = events.send(Event::Shards {
            node: index,
            shards: scheduler.stats().shards_owned,
        });
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A node as a separate process: events go to stdout, one per line.
async fn worker(o: Options, index: usize) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(run_node(o, index, tx));
    let mut out = std::io::stdout().lock();
    while let Some(event) = rx.recv().await {
        let _ = match event {
            Event::Delivered { task, late_ms, .. } => writeln!(out, "D {task} {late_ms:.3}"),
            Event::Shards { shards, .. } => writeln!(out, "S {shards}"),
        };
        let _ = out.flush();
    }
}

/// A handle to kill one node.
enum NodeHandle {
    Thread(Option<tokio::sync::oneshot::Sender<()>>),
    Process(tokio::process::Child),
}

impl NodeHandle {
    async fn kill(&mut self) {
        match self {
            NodeHandle::Thread(stop) => {
                if let Some(stop) = stop.take() {
                    let _ = stop.send(());
                }
            }
            NodeHandle::Process(child) => {
                let _ = child.kill().await;
            }
        }
    }
}

fn spawn_thread_node(
    o: &Options,
    index: usize,
    events: mpsc::UnboundedSender<Event>,
) -> NodeHandle {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let o = o.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            tokio::select! {
                _ = run_node(o, index, events) => {}
                _ = stop_rx => {}
            }
        });
        // Dropping the runtime here cancels every task of the node at once:
        // nothing is released, nothing recorded, as in a crash.
        drop(rt);
    });
    NodeHandle::Thread(Some(stop_tx))
}

fn spawn_process_node(
    o: &Options,
    index: usize,
    events: mpsc::UnboundedSender<Event>,
) -> NodeHandle {
    let exe = std::env::current_exe().expect("own path");
    let mut child = tokio::process::Command::new(exe)
        .args([
            "--worker",
            &index.to_string(),
            "--schema",
            &o.schema,
            "--shards",
            &o.shards.to_string(),
        ])
        .args(["--postgres", o.postgres.as_deref().unwrap()])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start a node process");
    let stdout = child.stdout.take().unwrap();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut parts = line.split(' ');
            let event = match (parts.next(), parts.next(), parts.next()) {
                (Some("D"), Some(task), Some(late)) => Event::Delivered {
                    node: index,
                    task: task.parse().unwrap_or(-1),
                    late_ms: late.parse().unwrap_or(f64::NAN),
                },
                (Some("S"), Some(shards), _) => Event::Shards {
                    node: index,
                    shards: shards.parse().unwrap_or(0),
                },
                _ => continue,
            };
            let _ = events.send(event);
        }
    });
    NodeHandle::Process(child)
}

#[tokio::main]
async fn main() {
    let (o, worker_index) = parse();
    if let Some(index) = worker_index {
        worker(o, index).await;
        return;
    }
    let backend = if o.postgres.is_some() {
        "PostgreSQL, one process per node"
    } else {
        "SQLite, one thread per node"
    };
    println!(
        "{} nodes on {backend}; {} tasks over {} s; {} shards; lease TTL {TTL:?}, heartbeat {HEARTBEAT:?}",
        o.nodes, o.tasks, o.over, o.shards
    );
    // The SQLite database (and its write-ahead log) lives in a directory of
    // its own, removed when this guard drops: at the end, on an error, or
    // on Ctrl-C (which ends the run below).
    let _files = (o.postgres.is_none()).then(|| {
        let dir = o.sqlite.parent().expect("a directory").to_path_buf();
        std::fs::create_dir_all(&dir).expect("create the demo's directory");
        RemoveOnDrop(dir)
    });
    let store = open(&o).await;
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let mut nodes: Vec<NodeHandle> = (0..o.nodes)
        .map(|i| match &o.postgres {
            Some(_) => spawn_process_node(&o, i, events_tx.clone()),
            None => spawn_thread_node(&o, i, events_tx.clone()),
        })
        .collect();
    drop(events_tx);

    // Let the nodes join and balance, then schedule.
    tokio::time::sleep(HEARTBEAT * 4).await;
    // Planned to be far enough ahead that every task is stored before the
    // first is due; a slow machine may take longer, which is reported.
    let scheduling = Instant::now();
    let start = SystemTime::now() + Duration::from_secs(1) + Duration::from_micros(400 * o.tasks);
    let plan: Vec<(u64, SystemTime)> = (0..o.tasks)
        .map(|i| {
            (
                i,
                start + Duration::from_secs_f64(o.over * i as f64 / o.tasks as f64),
            )
        })
        .collect();
    let stored: Vec<(i64, SystemTime)> = futures::stream::iter(plan)
        .map(|(i, at)| {
            let store = store.clone();
            async move {
                let id = store
                    .schedule(i.to_le_bytes().to_vec())
                    .at(at)
                    .await
                    .expect("schedule");
                (id.get(), at)
            }
        })
        .buffered(16)
        .collect()
        .await;
    let ids: Vec<i64> = stored.iter().map(|s| s.0).collect();
    let due: HashMap<i64, SystemTime> = stored.into_iter().collect();
    let first_due = start;
    println!(
        "scheduled {} tasks in {:.2?}",
        ids.len(),
        scheduling.elapsed()
    );
    if let Ok(over) = SystemTime::now().duration_since(start) {
        println!(
            "note: scheduling ran {over:.2?} past the first due time (a busy machine), so the first tasks' lateness includes that wait"
        );
    }

    let mut deliveries: HashMap<i64, u32> = HashMap::new();
    let mut per_node_delivered = vec![0u64; o.nodes];
    let mut shards = vec![0u32; o.nodes];
    let mut lateness = Vec::with_capacity(o.tasks as usize);
    // Lateness of tasks not due between the kill and the takeover: what a
    // healthy cluster delivers.
    let mut steady = Vec::with_capacity(o.tasks as usize);
    let mut gap: Option<(SystemTime, SystemTime)> = None;
    let mut killed: Option<(usize, Instant)> = None;
    let mut takeover: Option<Duration> = None;
    let mut last_delivery = SystemTime::now();
    let half = start + Duration::from_secs_f64(o.over / 2.0);
    let give_up = Instant::now() + Duration::from_secs_f64(o.over + 40.0);
    let mut report = tokio::time::interval(Duration::from_secs(1));
    let victim = 1.min(o.nodes - 1);

    let mut interrupted = false;
    while deliveries.len() < ids.len() && Instant::now() < give_up {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {
                println!("interrupted: stopping the nodes and removing the demo's data");
                interrupted = true;
                break;
            }
            event = events.recv() => match event {
                Some(Event::Delivered { node, task, late_ms }) => {
                    let n = deliveries.entry(task).or_default();
                    *n += 1;
                    if *n == 1 {
                        lateness.push(late_ms);
                        let at = due.get(&task).copied().unwrap_or(start);
                        let in_gap = match (killed, gap) {
                            (_, Some((from, to))) => at >= from && at <= to,
                            (Some(_), None) => true,
                            (None, _) => false,
                        };
                        if !in_gap {
                            steady.push(late_ms);
                        }
                    }
                    per_node_delivered[node] += 1;
                    last_delivery = SystemTime::now();
                }
                Some(Event::Shards { node, shards: s }) => {
                    if killed.map(|k| k.0) != Some(node) {
                        shards[node] = s;
                    }
                    if let Some((dead, at)) = killed {
                        let held: u32 = shards.iter().enumerate().filter(|(i, _)| *i != dead).map(|(_, s)| s).sum();
                        if takeover.is_none() && held == o.shards {
                            takeover = Some(at.elapsed());
                            let now = SystemTime::now();
                            gap = Some((now - at.elapsed(), now));
                        }
                    }
                }
                None => break,
            },
            _ = report.tick() => {
                let line: Vec<String> = (0..o.nodes)
                    .map(|i| {
                        if killed.map(|k| k.0) == Some(i) {
                            format!("node-{i}: dead ({} delivered)", per_node_delivered[i])
                        } else {
                            format!("node-{i}: {:>3} shards {:>5} delivered", shards[i], per_node_delivered[i])
                        }
                    })
                    .collect();
                println!("{} | {}/{} done", line.join(" | "), deliveries.len(), ids.len());
                if o.kill && killed.is_none() && SystemTime::now() >= half && o.nodes > 1 {
                    nodes[victim].kill().await;
                    shards[victim] = 0;
                    killed = Some((victim, Instant::now()));
                    println!("*** killed node-{victim} (no shutdown: its leases expire after {TTL:?})");
                }
            }
        }
    }

    let lost = ids.iter().filter(|id| !deliveries.contains_key(id)).count();
    let duplicates: u32 = deliveries.values().map(|n| n - 1).sum();
    lateness.sort_by(|a, b| a.total_cmp(b));
    steady.sort_by(|a, b| a.total_cmp(b));
    let span = last_delivery.duration_since(first_due).unwrap_or_default();
    println!();
    println!("delivered   {} of {}", deliveries.len(), ids.len());
    println!("duplicates  {duplicates} (at-least-once redeliveries of tasks in flight on the killed node)");
    println!("lost        {lost}");
    match (killed, takeover) {
        (Some(_), Some(t)) => {
            println!("takeover    {t:.2?} after the kill (TTL {TTL:?} + heartbeat {HEARTBEAT:?})")
        }
        (Some(_), None) => println!("takeover    not observed"),
        _ => {}
    }
    println!(
        "lateness    p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        percentile(&lateness, 0.5),
        percentile(&lateness, 0.99),
        lateness.last().copied().unwrap_or(f64::NAN)
    );
    println!(
        "            outside the takeover gap: p50 {:.1} ms, p99 {:.1} ms ({} tasks)",
        percentile(&steady, 0.5),
        percentile(&steady, 0.99),
        steady.len()
    );
    println!(
        "throughput  {:.0} tasks/s from the first due time to the last delivery",
        deliveries.len() as f64 / span.as_secs_f64().max(1e-3)
    );
    for node in &mut nodes {
        node.kill().await;
    }
    drop(store);
    if let Some(url) = &o.postgres {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if let Ok(pool) = sqlx::PgPool::connect(url).await {
            let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {} CASCADE", o.schema))
                .execute(&pool)
                .await;
        }
    }
    drop(_files);
    if lost > 0 && !interrupted {
        println!("{lost} tasks were not delivered within the run");
        std::process::exit(1);
    }
}

/// Removes a directory and everything in it when dropped.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
