//! The four scenarios, written once for every contender.
//!
//! A contender is one job system on one backend. Its binary (`peer` for the
//! peers, `ttw-peer` for this crate and the polling baseline) runs exactly
//! one scenario per process, on a database the runner made fresh for it, and
//! prints its results as `key value` lines on stdout for the runner to read.
//!
//! ```text
//! peer <contender> <scenario> --postgres URL | --sqlite DIR
//! ```
//!
//! Every task's payload carries its number and the instant it was asked for
//! (milliseconds since the epoch); the handler hands both to [`seen`], which
//! records the lateness (handler start minus that instant) and counts
//! repeats, so no contender's own column types or rounding decide what is
//! measured.

#![allow(dead_code)] // each binary uses the part its contenders need

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Handlers in flight at once when the runner does not say: the same for
/// every contender.
pub const CONCURRENCY: usize = 64;

/// Handlers in flight at once, the same for every contender: the runner's
/// `--concurrency` (it sets `PEERS_CONCURRENCY`), else [`CONCURRENCY`].
pub fn concurrency() -> usize {
    env_usize("PEERS_CONCURRENCY", CONCURRENCY)
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Tasks in the drain scenario, stored before the workers start
/// (`PEERS_DRAIN_TASKS`).
pub const DRAIN_TASKS: usize = 50_000;
/// Tasks in the burst scenario, all due at one instant [`BURST_AHEAD`]
/// after the first insert (`PEERS_BURST_TASKS`).
pub const BURST_TASKS: usize = 100_000;
/// How far ahead the burst's instant is.
pub const BURST_AHEAD: Duration = Duration::from_secs(30);
/// Tasks a second falling due in the sustained scenario
/// (`PEERS_SUSTAINED_RATE`), for [`SUSTAINED_SECS`] seconds
/// (`PEERS_SUSTAINED_SECS`), the first [`SUSTAINED_AHEAD`] after the first
/// insert.
pub const SUSTAINED_RATE: usize = 4_000;
pub const SUSTAINED_SECS: usize = 60;
pub const SUSTAINED_AHEAD: Duration = Duration::from_secs(10);
/// Tasks in scenario 1 (throughput).
pub const THROUGHPUT_TASKS: usize = 20_000;
/// Tasks in scenario 2 (precision), due from 1 s to 10 s after the first
/// insert.
pub const PRECISION_TASKS: usize = 10_000;
/// Inserts in scenario 4 (one at a time, then one batch).
pub const INSERT_TASKS: usize = 10_000;
/// Batch size for scenarios 1 and 2 where a contender has a batch insert.
pub const BATCH: usize = 1_000;
/// Single inserts in flight at once where a contender has no batch insert.
pub const IN_FLIGHT: usize = 16;
/// How long a scenario may take before the contender gives up.
pub const GIVE_UP: Duration = Duration::from_secs(240);

/// Where a contender keeps its tasks.
#[derive(Clone, Debug)]
pub enum Backend {
    /// A PostgreSQL database the runner created for this run.
    Postgres(String),
    /// A directory the runner created for this run.
    Sqlite(PathBuf),
}

/// What one process measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    Throughput,
    Precision,
    Idle,
    Insert,
    Drain,
    Burst,
    Sustained,
}

impl Scenario {
    pub const ALL: [Scenario; 7] = [
        Scenario::Throughput,
        Scenario::Precision,
        Scenario::Idle,
        Scenario::Insert,
        Scenario::Drain,
        Scenario::Burst,
        Scenario::Sustained,
    ];

    /// What the runner runs when not told: the long burst and sustained
    /// runs only on request.
    pub const DEFAULT: [Scenario; 5] = [
        Scenario::Throughput,
        Scenario::Precision,
        Scenario::Idle,
        Scenario::Insert,
        Scenario::Drain,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Throughput => "throughput",
            Scenario::Precision => "precision",
            Scenario::Idle => "idle",
            Scenario::Insert => "insert",
            Scenario::Drain => "drain",
            Scenario::Burst => "burst",
            Scenario::Sustained => "sustained",
        }
    }

    fn parse(s: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// One job system, driven through what its documentation recommends.
pub trait Contender: Sized {
    /// Whether it has a batch insert (and [`Contender::insert_batch`] works).
    const HAS_BATCH: bool;

    /// Connects, creates its schema, and makes a client; workers not yet
    /// running.
    fn open(backend: &Backend) -> impl Future<Output = Self>;

    /// Starts workers: at most [`concurrency()`] handlers at once, each calling
    /// [`seen`] with the payload's task number and due instant.
    fn start(&mut self) -> impl Future<Output = ()>;

    /// Inserts one task, due at `task.due_ms`.
    fn insert(&self, task: Payload) -> impl Future<Output = ()>;

    /// Inserts tasks in one batch (only called when [`Contender::HAS_BATCH`]).
    fn insert_batch(&self, tasks: &[Payload]) -> impl Future<Output = ()>;
}

/// What every task carries: its number and when it was asked to run.
#[derive(Clone, Copy, Debug)]
pub struct Payload {
    pub n: u64,
    pub due_ms: i64,
}

impl Payload {
    /// 16 bytes, for contenders whose payload is bytes.
    pub fn to_bytes(self) -> Vec<u8> {
        let mut b = Vec::with_capacity(16);
        b.extend_from_slice(&self.n.to_le_bytes());
        b.extend_from_slice(&self.due_ms.to_le_bytes());
        b
    }

    pub fn from_bytes(b: &[u8]) -> Payload {
        let n = u64::from_le_bytes(b[..8].try_into().expect("16-byte payload"));
        let due_ms = i64::from_le_bytes(b[8..16].try_into().expect("16-byte payload"));
        Payload { n, due_ms }
    }

    pub fn due(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.due_ms as u64)
    }
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

fn now_ms_f64() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
        * 1e3
}

#[derive(Default)]
struct Record {
    lateness: Vec<f64>,
    /// Each first start's due instant and lateness, in ms, when
    /// `PEERS_TRACE` names a file to write them to.
    trace: Vec<(i64, f64)>,
    runs: Vec<u8>,
    repeats: usize,
}

static RECORD: Mutex<Option<Record>> = Mutex::new(None);
static DISTINCT: AtomicUsize = AtomicUsize::new(0);
static DONE: OnceLock<tokio::sync::Notify> = OnceLock::new();
static TARGET: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Whether `PEERS_TRACE` asks for each task's lateness.
fn tracing() -> bool {
    static TRACE: OnceLock<bool> = OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("PEERS_TRACE").is_some())
}

/// Writes the trace to the file `PEERS_TRACE` names: a line of due
/// instant (ms since the epoch) and lateness (ms) per task, in start order.
fn write_trace(record: &Record) {
    if let Some(path) = std::env::var_os("PEERS_TRACE") {
        let text: String = record
            .trace
            .iter()
            .map(|(due, late)| format!("{due} {late:.3}\n"))
            .collect();
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("PEERS_TRACE: {e}");
        }
    }
}

fn done() -> &'static tokio::sync::Notify {
    DONE.get_or_init(tokio::sync::Notify::new)
}

/// Called by every handler as it starts.
pub fn seen(task: Payload) {
    let late = now_ms_f64() - task.due_ms as f64;
    let mut guard = RECORD.lock().expect("record lock");
    let record = guard.get_or_insert_with(Record::default);
    let i = task.n as usize;
    if record.runs.len() <= i {
        record.runs.resize(i + 1, 0);
    }
    record.runs[i] = record.runs[i].saturating_add(1);
    if record.runs[i] > 1 {
        record.repeats += 1;
        return;
    }
    record.lateness.push(late);
    if tracing() {
        record.trace.push((task.due_ms, late));
    }
    drop(guard);
    if DISTINCT.fetch_add(1, Ordering::AcqRel) + 1 >= TARGET.load(Ordering::Acquire) {
        done().notify_one();
    }
}

/// Waits until `n` distinct tasks have started, or gives up after
/// [`GIVE_UP`]; returns how many started.
async fn wait_for(n: usize) -> usize {
    TARGET.store(n, Ordering::Release);
    let give_up = tokio::time::sleep(GIVE_UP);
    tokio::pin!(give_up);
    loop {
        let notified = done().notified();
        let started = DISTINCT.load(Ordering::Acquire);
        if started >= n {
            return started;
        }
        tokio::select! {
            _ = notified => {}
            _ = &mut give_up => return DISTINCT.load(Ordering::Acquire),
        }
    }
}

/// This process's CPU time so far (user and system), from `/proc`.
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let per_s: u64 = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100);
    Some(Duration::from_secs_f64(ticks as f64 / per_s as f64))
}

fn take_record() -> Record {
    let record = RECORD
        .lock()
        .expect("record lock")
        .take()
        .unwrap_or_default();
    write_trace(&record);
    record
}

/// Inserts `tasks` in order: batches of [`BATCH`] where the contender has
/// them, otherwise single inserts with [`IN_FLIGHT`] in flight. Returns how
/// many tasks were inserted after their due instant.
async fn insert_all<C: Contender>(c: &C, tasks: &[Payload]) -> usize {
    use futures::StreamExt;
    let mut late = 0;
    if C::HAS_BATCH {
        for chunk in tasks.chunks(BATCH) {
            c.insert_batch(chunk).await;
            let now = now_ms();
            late += chunk.iter().filter(|t| t.due_ms < now).count();
        }
    } else {
        let mut inserts = futures::stream::iter(tasks.iter().copied())
            .map(|t| async move {
                c.insert(t).await;
                t.due_ms < now_ms()
            })
            .buffered(IN_FLIGHT);
        while let Some(was_late) = inserts.next().await {
            late += usize::from(was_late);
        }
    }
    late
}

fn print_lateness(lateness: &[f64]) {
    let mut line = String::with_capacity(lateness.len() * 8);
    line.push_str("lateness_ms");
    for l in lateness {
        line.push(' ');
        line.push_str(&format!("{l:.3}"));
    }
    println!("{line}");
}

/// The whole of a contender binary's `main`: reads the command line, runs
/// one scenario, prints its results. `run` is called with the contender's
/// name and must call [`scenario`] with the matching type.
pub fn main<F, Fut>(run: F)
where
    F: FnOnce(String, Scenario, Backend) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage =
        "usage: <contender> <throughput|precision|idle|insert|drain|burst|sustained> --postgres URL | --sqlite DIR";
    let parsed = match args.as_slice() {
        [name, scenario, flag, place] => {
            let scenario = Scenario::parse(scenario);
            let backend = match flag.as_str() {
                "--postgres" => Some(Backend::Postgres(place.clone())),
                "--sqlite" => Some(Backend::Sqlite(PathBuf::from(place))),
                _ => None,
            };
            scenario.zip(backend).map(|(s, b)| (name.clone(), s, b))
        }
        _ => None,
    };
    let Some((name, scenario, backend)) = parsed else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    if let Err(e) = rt.block_on(run(name, scenario, backend)) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
    // Workers may still hold connections; the process is done.
    std::process::exit(0);
}

/// Inserts `tasks` (workers running), waits for them, and prints how the
/// insert went and every task's lateness: the precision, burst and
/// sustained scenarios.
async fn lateness_run<C: Contender>(c: &C, tasks: &[Payload]) {
    let t0 = Instant::now();
    let inserted_late = insert_all(c, tasks).await;
    let inserted = t0.elapsed();
    let started = wait_for(tasks.len()).await;
    // Give a repeat a moment to show itself.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let record = take_record();
    println!("tasks {}", tasks.len());
    println!("inserted_s {:.3}", inserted.as_secs_f64());
    println!("inserted_late {inserted_late}");
    println!("not_run {}", tasks.len() - started);
    println!("repeats {}", record.repeats);
    print_lateness(&record.lateness);
}

/// Runs one scenario for contender `C`.
pub async fn scenario<C: Contender>(scenario: Scenario, backend: Backend) -> Result<(), String> {
    let mut c = C::open(&backend).await;
    match scenario {
        Scenario::Throughput => {
            c.start().await;
            let t0 = Instant::now();
            let due_ms = now_ms();
            let tasks: Vec<Payload> = (0..THROUGHPUT_TASKS as u64)
                .map(|n| Payload { n, due_ms })
                .collect();
            insert_all(&c, &tasks).await;
            let inserted = t0.elapsed();
            let started = wait_for(tasks.len()).await;
            let span = t0.elapsed();
            // Give a repeat a moment to show itself.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let record = take_record();
            println!("tasks {}", tasks.len());
            println!("inserted_s {:.3}", inserted.as_secs_f64());
            println!("span_s {:.3}", span.as_secs_f64());
            // Short of all of them (given up), the rate of those that ran.
            println!("not_run {}", tasks.len() - started);
            println!("tasks_per_s {:.1}", started as f64 / span.as_secs_f64());
            println!("repeats {}", record.repeats);
        }
        Scenario::Precision => {
            c.start().await;
            let first = now_ms() + 1_000;
            let n = PRECISION_TASKS as i64;
            let tasks: Vec<Payload> = (0..n)
                .map(|i| Payload {
                    n: i as u64,
                    due_ms: first + 9_000 * i / (n - 1),
                })
                .collect();
            lateness_run(&c, &tasks).await;
        }
        Scenario::Idle => {
            c.start().await;
            println!("ready");
            // The runner measures from outside, then kills the process.
            std::future::pending::<()>().await;
        }
        Scenario::Drain => {
            // Stored before the workers start; timed from the start.
            let n = env_usize("PEERS_DRAIN_TASKS", DRAIN_TASKS);
            let due_ms = now_ms();
            let tasks: Vec<Payload> = (0..n as u64).map(|n| Payload { n, due_ms }).collect();
            insert_all(&c, &tasks).await;
            let cpu0 = process_cpu();
            let t0 = Instant::now();
            c.start().await;
            let started = wait_for(n).await;
            let span = t0.elapsed();
            let cpu = process_cpu().zip(cpu0).map(|(a, b)| a - b);
            tokio::time::sleep(Duration::from_millis(500)).await;
            let record = take_record();
            println!("tasks {n}");
            println!("span_s {:.3}", span.as_secs_f64());
            println!("not_run {}", n - started);
            println!("tasks_per_s {:.1}", started as f64 / span.as_secs_f64());
            if let Some(cpu) = cpu {
                println!(
                    "cpu_us_per_task {:.1}",
                    cpu.as_secs_f64() * 1e6 / started.max(1) as f64
                );
            }
            println!("repeats {}", record.repeats);
        }
        Scenario::Burst => {
            c.start().await;
            let n = env_usize("PEERS_BURST_TASKS", BURST_TASKS);
            let due_ms = now_ms() + BURST_AHEAD.as_millis() as i64;
            let tasks: Vec<Payload> = (0..n as u64).map(|n| Payload { n, due_ms }).collect();
            lateness_run(&c, &tasks).await;
        }
        Scenario::Sustained => {
            c.start().await;
            let rate = env_usize("PEERS_SUSTAINED_RATE", SUSTAINED_RATE) as i64;
            let secs = env_usize("PEERS_SUSTAINED_SECS", SUSTAINED_SECS) as i64;
            let first = now_ms() + SUSTAINED_AHEAD.as_millis() as i64;
            let tasks: Vec<Payload> = (0..rate * secs)
                .map(|i| Payload {
                    n: i as u64,
                    due_ms: first + i * 1_000 / rate,
                })
                .collect();
            lateness_run(&c, &tasks).await;
        }
        Scenario::Insert => {
            let due_ms = now_ms() + 3_600_000;
            let tasks: Vec<Payload> = (0..INSERT_TASKS as u64)
                .map(|n| Payload { n, due_ms })
                .collect();
            let t0 = Instant::now();
            for &t in &tasks {
                c.insert(t).await;
            }
            let single = t0.elapsed();
            println!(
                "single_per_s {:.1}",
                tasks.len() as f64 / single.as_secs_f64()
            );
            if C::HAS_BATCH {
                let batch: Vec<Payload> = tasks
                    .iter()
                    .map(|t| Payload {
                        n: t.n + INSERT_TASKS as u64,
                        ..*t
                    })
                    .collect();
                let t0 = Instant::now();
                c.insert_batch(&batch).await;
                let took = t0.elapsed();
                println!("batch_per_s {:.1}", batch.len() as f64 / took.as_secs_f64());
            }
        }
    }
    Ok(())
}
