//! Flow control measured with real node processes: three nodes (this
//! program started again with `--node I`) serve one queue of a store,
//! each handler logs when it starts and ends, and one node is `SIGKILL`ed
//! half-way. The figures come from the handlers' own logs.
//!
//! ```text
//! cargo run --release -p ttw-durable --example flow_control -- --postgres URL --scenario concurrency
//! cargo run --release -p ttw-durable --example flow_control -- --postgres URL --scenario rate
//! cargo run --release -p ttw-durable --example flow_control -- --postgres URL --scenario pause
//! cargo run --release -p ttw-durable --example flow_control -- --sqlite /tmp/flow.db --scenario concurrency
//! ```
//!
//! - `concurrency`: a global concurrency of 8 (`--limit`), `--tasks`
//!   (default 10,000) due at once, handlers of `--took` ms (default 100):
//!   the most running at once (from the logs) and how many were busy on
//!   average while there was a backlog.
//! - `rate`: 200 a second with bursts of 20 (`--rate`, `--burst`),
//!   `--tasks` (default 20,000) due at once: the busiest 1 s window of
//!   starts and the rate over the run.
//! - `pause`: 200 tasks a second due for 8 s; paused at 3 s for 3 s: the
//!   starts on any node later than the pause's return plus 1 s, and
//!   whether all were delivered after.
//! - `fairness`: key A's 100,000 tasks (`--tasks`) due at once, key B's
//!   100 due over the next minute, a concurrency of `--limit` (give 16) and 4
//!   a key (`--key-cap`, 0 for none): B's lateness (p50, p99, max) and how
//!   many of A's ran meanwhile. It stops when B's last has run.
//!
//! Options: `--nodes N` (default 3), `--no-kill`.

// A measurement, not the task system: it reads the system's clock
// directly (the library reads it only through its clock; see clippy.toml).
#![allow(clippy::disallowed_methods)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncBufReadExt, BufReader};
use ttw_durable::{NewTask, QueueLimits, Rate, Scheduler, Store, StoreBuilder};

const QUEUE: &str = "partner";

#[derive(Debug, Clone)]
struct Options {
    postgres: Option<String>,
    schema: String,
    sqlite: PathBuf,
    scenario: String,
    tasks: Option<usize>,
    took_ms: u64,
    limit: u32,
    rate: u32,
    burst: u32,
    nodes: usize,
    kill: bool,
    node: Option<usize>,
    logs: PathBuf,
    key_cap: u32,
}

fn parse() -> Options {
    let mut o = Options {
        postgres: None,
        schema: format!("ttw_flow_{}", std::process::id()),
        sqlite: std::env::temp_dir().join(format!("ttw-flow-{}.db", std::process::id())),
        scenario: "concurrency".into(),
        tasks: None,
        took_ms: 100,
        limit: 8,
        rate: 200,
        burst: 20,
        nodes: 3,
        kill: true,
        node: None,
        logs: std::env::temp_dir().join(format!("ttw-flow-logs-{}", std::process::id())),
        key_cap: 4,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| panic!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--postgres" => o.postgres = Some(value()),
            "--schema" => o.schema = value(),
            "--sqlite" => o.sqlite = value().into(),
            "--scenario" => o.scenario = value(),
            "--tasks" => o.tasks = Some(value().parse().expect("--tasks N")),
            "--took" => o.took_ms = value().parse().expect("--took MS"),
            "--limit" => o.limit = value().parse().expect("--limit N"),
            "--rate" => o.rate = value().parse().expect("--rate N"),
            "--burst" => o.burst = value().parse().expect("--burst N"),
            "--nodes" => o.nodes = value().parse().expect("--nodes N"),
            "--no-kill" => o.kill = false,
            "--node" => o.node = Some(value().parse().expect("--node I")),
            "--logs" => o.logs = value().into(),
            "--key-cap" => o.key_cap = value().parse().expect("--key-cap N"),
            other => panic!("unknown option {other}"),
        }
    }
    o
}

async fn open(o: &Options) -> Store {
    let builder = StoreBuilder::default().connect_timeout(Duration::from_secs(30));
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

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// A node process: serves the queue, logging `S id µs due_µs payload` and
/// `E id µs`.
async fn node(o: Options, index: usize) {
    let store = open(&o).await;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(o.logs.join(format!("node-{index}.log")))
        .expect("the node's log");
    let log = Arc::new(Mutex::new(log));
    let took = Duration::from_millis(o.took_ms);
    let _scheduler = Scheduler::builder(store)
        .node_id(format!("flow-{index}"))
        .heartbeat(Duration::from_millis(500))
        .lease_ttl(Duration::from_secs(3))
        .callback_timeout(Duration::from_secs(2))
        .lock_grace(Duration::from_secs(1))
        .max_concurrency(64)
        .handle(QUEUE, move |task| {
            let log = log.clone();
            async move {
                let id = task.id().get();
                let due = task
                    .run_at()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_micros();
                let who = String::from_utf8_lossy(task.payload())
                    .chars()
                    .next()
                    .unwrap_or('-');
                writeln!(log.lock().unwrap(), "S {id} {} {due} {who}", now_us()).unwrap();
                tokio::time::sleep(took).await;
                writeln!(log.lock().unwrap(), "E {id} {}", now_us()).unwrap();
                Ok::<_, String>(())
            }
        })
        .start_queues()
        .await
        .expect("start the node");
    println!("READY");
    std::future::pending::<()>().await;
}

/// How many of key B's tasks have started, by the logs.
fn b_runs(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            std::fs::read_to_string(e.unwrap().path())
                .unwrap_or_default()
                .lines()
                .filter(|l| l.starts_with("S ") && l.ends_with(" B"))
                .count()
        })
        .sum()
}

/// The starts and ends every node logged: (start µs, end µs or `None`).
fn read_logs(dir: &Path) -> Vec<(u64, Option<u64>)> {
    let mut starts = std::collections::HashMap::new();
    let mut runs = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() < 3 {
                continue;
            }
            let (id, at): (i64, u64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
            match f[0] {
                "S" => {
                    if let Some(old) = starts.insert(id, at) {
                        // A redelivery after the kill: the first run ended
                        // with its node.
                        runs.push((old, None));
                    }
                }
                _ => {
                    if let Some(start) = starts.remove(&id) {
                        runs.push((start, Some(at)));
                    }
                }
            }
        }
    }
    runs.extend(starts.into_values().map(|s| (s, None)));
    runs
}

/// The most running at once; a run with no end ends at `killed`.
fn most_at_once(runs: &[(u64, Option<u64>)], killed: u64) -> usize {
    let mut events: Vec<(u64, i32)> = Vec::new();
    for &(s, e) in runs {
        events.push((s, 1));
        events.push((e.unwrap_or(killed.max(s)), -1));
    }
    events.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in events {
        now += step;
        most = most.max(now);
    }
    most as usize
}

#[tokio::main]
async fn main() {
    let o = parse();
    if let Some(index) = o.node {
        node(o, index).await;
        return;
    }
    let _ = std::fs::remove_dir_all(&o.logs);
    std::fs::create_dir_all(&o.logs).unwrap();
    if o.postgres.is_none() {
        let _ = std::fs::remove_file(&o.sqlite);
    }
    let store = open(&o).await;
    match o.scenario.as_str() {
        "concurrency" => {
            store
                .set_queue_limits(QUEUE, QueueLimits::new().concurrency(o.limit))
                .await
                .unwrap();
        }
        "rate" => {
            let rate = Rate::per_second(o.rate).burst(o.burst);
            store
                .set_queue_limits(QUEUE, QueueLimits::new().rate(rate))
                .await
                .unwrap();
        }
        "pause" => {}
        "fairness" => {
            let mut limits = QueueLimits::new().concurrency(o.limit);
            if o.key_cap > 0 {
                limits = limits.per_key_concurrency(o.key_cap);
            }
            store.set_queue_limits(QUEUE, limits).await.unwrap();
        }
        other => panic!("unknown scenario {other}"),
    }
    // The nodes.
    let exe = std::env::current_exe().unwrap();
    let mut children = Vec::new();
    for i in 0..o.nodes {
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.args(["--node", &i.to_string(), "--logs"])
            .arg(&o.logs)
            .args(["--schema", &o.schema, "--took", &o.took_ms.to_string()])
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        match &o.postgres {
            Some(url) => cmd.args(["--postgres", url]),
            None => cmd.arg("--sqlite").arg(&o.sqlite),
        };
        let mut child = cmd.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        while let Some(line) = lines.next_line().await.unwrap() {
            if line == "READY" {
                break;
            }
        }
        children.push(child);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let tasks = o.tasks.unwrap_or(match o.scenario.as_str() {
        "concurrency" => 10_000,
        "rate" => 20_000,
        "fairness" => 100_000,
        _ => 1_600,
    });
    let started = Instant::now();
    let t0 = now_us();
    if o.scenario == "pause" {
        // 200 a second for 8 s.
        let per = tasks / 8;
        let batch: Vec<NewTask> = (0..tasks)
            .map(|i| {
                NewTask::new(format!("{i}"))
                    .queue(QUEUE)
                    .delay(Duration::from_millis(
                        (i / per * 1000 + (i % per) * 1000 / per) as u64,
                    ))
            })
            .collect();
        for chunk in batch.chunks(1000) {
            store.schedule_batch(chunk.to_vec()).await.unwrap();
        }
    } else if o.scenario == "fairness" {
        // B's first, so that A's insert does not delay them.
        let b: Vec<NewTask> = (0..100u64)
            .map(|i| {
                NewTask::new("B")
                    .queue(QUEUE)
                    .partition_key("B")
                    .delay(Duration::from_millis(2_000 + i * 600))
            })
            .collect();
        store.schedule_batch(b).await.unwrap();
        let a: Vec<NewTask> = (0..tasks)
            .map(|_| NewTask::new("A").queue(QUEUE).partition_key("A"))
            .collect();
        for chunk in a.chunks(1000) {
            store.schedule_batch(chunk.to_vec()).await.unwrap();
        }
    } else {
        let batch: Vec<NewTask> = (0..tasks)
            .map(|i| NewTask::new(format!("{i}")).queue(QUEUE))
            .collect();
        for chunk in batch.chunks(1000) {
            store.schedule_batch(chunk.to_vec()).await.unwrap();
        }
    }
    let mut killed_at = u64::MAX;
    let mut paused = None;
    let mut resumed = None;
    let deadline = started + Duration::from_secs(600);
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if o.scenario == "fairness" {
            if started.elapsed() > Duration::from_secs(63) && b_runs(&o.logs) >= 100 {
                break;
            }
            if started.elapsed() > Duration::from_secs(240) {
                println!("B's tasks not all run within 4 minutes");
                break;
            }
            continue;
        }
        let done = store.counts().await.unwrap().done as usize;
        if o.kill && killed_at == u64::MAX && done >= tasks / 2 {
            children[0].start_kill().unwrap();
            killed_at = now_us();
            println!(
                "node 0 SIGKILLed at {:.1} s, {done} done",
                started.elapsed().as_secs_f64()
            );
        }
        if o.scenario == "pause" {
            let at = started.elapsed();
            if paused.is_none() && at >= Duration::from_secs(3) {
                store.pause_queue(QUEUE).await.unwrap();
                paused = Some(now_us());
            }
            if resumed.is_none() && at >= Duration::from_secs(6) {
                store.resume_queue(QUEUE).await.unwrap();
                resumed = Some(now_us());
            }
        }
        if done >= tasks {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not done within 10 minutes: {done} of {tasks}"
        );
    }
    let wall = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let runs = read_logs(&o.logs);
    let mut starts: Vec<u64> = runs.iter().map(|r| r.0).collect();
    starts.sort_unstable();
    println!(
        "{} scenario, {} nodes{}, {tasks} tasks: {} starts logged, all done in {wall:.2} s",
        o.scenario,
        o.nodes,
        if o.kill && o.scenario != "fairness" {
            " (one SIGKILLed half-way)"
        } else {
            ""
        },
        runs.len()
    );
    match o.scenario.as_str() {
        "concurrency" => {
            let most = most_at_once(&runs, killed_at);
            let busy_us: u64 = runs
                .iter()
                .map(|&(s, e)| e.unwrap_or(killed_at.max(s)).saturating_sub(s))
                .sum();
            let span = starts.last().unwrap() - t0;
            println!(
                "limit {}: most at once {most}; busy on average {:.2} (handler time / span of starts)",
                o.limit,
                busy_us as f64 / span as f64
            );
        }
        "fairness" => {
            let (mut late, mut a_runs) = (Vec::new(), 0);
            for entry in std::fs::read_dir(&o.logs).unwrap() {
                for line in std::fs::read_to_string(entry.unwrap().path())
                    .unwrap()
                    .lines()
                {
                    let f: Vec<&str> = line.split(' ').collect();
                    if f.len() == 5 && f[0] == "S" {
                        let (start, due): (u64, u64) =
                            (f[2].parse().unwrap(), f[3].parse().unwrap());
                        if f[4] == "B" {
                            late.push(start.saturating_sub(due) as f64 / 1000.0);
                        } else {
                            a_runs += 1;
                        }
                    }
                }
            }
            late.sort_by(f64::total_cmp);
            let at = |p: f64| late[((late.len() as f64 - 1.0) * p).round() as usize];
            println!(
                "concurrency {}, {} a key: B's lateness p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms over {} runs; \
                 {a_runs} of A's ran meanwhile",
                o.limit,
                if o.key_cap > 0 { o.key_cap.to_string() } else { "no cap".into() },
                at(0.5),
                at(0.99),
                late.last().unwrap(),
                late.len()
            );
        }
        "rate" => {
            let window = 1_000_000u64;
            let (mut busiest, mut j) = (0usize, 0usize);
            for i in 0..starts.len() {
                while starts[j] + window <= starts[i] {
                    j += 1;
                }
                busiest = busiest.max(i - j + 1);
            }
            let span = (starts.last().unwrap() - starts[0]) as f64 / 1e6;
            println!(
                "rate {}/s burst {}: busiest 1 s window {busiest} starts (bound {}); {:.1} starts/s over {span:.1} s",
                o.rate,
                o.burst,
                o.rate + o.burst,
                (starts.len() as f64 - f64::from(o.burst)) / span
            );
        }
        _ => {
            let (p, r) = (paused.unwrap(), resumed.unwrap());
            let late = starts
                .iter()
                .filter(|&&s| s > p + 1_000_000 && s < r)
                .count();
            let within = starts
                .iter()
                .filter(|&&s| s > p && s <= p + 1_000_000)
                .count();
            let last_before = starts
                .iter()
                .filter(|&&s| s > p && s < r)
                .max()
                .map(|&s| (s - p) / 1000);
            println!(
                "paused for {:.1} s: {late} starts later than 1 s after the pause, {within} within it \
                 (the last {last_before:?} ms after); first start after the resume {:?} ms",
                (r - p) as f64 / 1e6,
                starts.iter().find(|&&s| s >= r).map(|&s| (s - r) / 1000)
            );
        }
    }
    for mut child in children {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    let _ = std::fs::remove_dir_all(&o.logs);
}
