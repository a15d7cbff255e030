//! The peers benchmark's runner: builds the contenders, runs every scenario
//! for each in turn over several interleaved rounds, each run in a process of
//! its own on a fresh database, then prints one table and draws the precision
//! distributions. See README.md.
//!
//! ```text
//! SQLX_OFFLINE=true cargo run --release --manifest-path peers/Cargo.toml -- [--rounds 3] [--idle-secs 60]
//!     [--only ttw,river] [--scenarios throughput,precision,idle,insert,drain,burst,sustained]
//!     [--concurrency 64] [--svg PATH]
//! ```

mod harness;
mod report;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use harness::Scenario;
use report::{plot, record, table, Results};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Db {
    Postgres,
    Sqlite,
}

/// One job system on one backend.
#[derive(Clone, Debug)]
struct Contender {
    /// The name its binary knows it by.
    name: &'static str,
    /// `peer` or `ttw-peer`.
    binary: &'static str,
    db: Db,
}

impl Contender {
    fn label(&self) -> String {
        let system = match self.name {
            "ttw" => "tokio-timing-wheel",
            "poll" => "poll every 1 s (baseline)",
            "river" => "River (riverqueue 0.5)",
            "graphile" => "graphile_worker 0.14",
            "apalis" => "apalis 1.0",
            "awa" => "awa 0.6",
            other => other,
        };
        let db = match self.db {
            Db::Postgres => "PostgreSQL",
            Db::Sqlite => "SQLite",
        };
        format!("{system}, {db}")
    }

    fn key(&self) -> String {
        format!("{}_{:?}", self.name, self.db).to_lowercase()
    }
}

const CONTENDERS: [(&str, &str, Db); 10] = [
    ("ttw", "ttw-peer", Db::Postgres),
    ("river", "peer", Db::Postgres),
    ("graphile", "peer", Db::Postgres),
    ("apalis", "peer", Db::Postgres),
    ("awa", "peer", Db::Postgres),
    ("poll", "ttw-peer", Db::Postgres),
    ("ttw", "ttw-peer", Db::Sqlite),
    ("river", "peer", Db::Sqlite),
    ("apalis", "peer", Db::Sqlite),
    ("poll", "ttw-peer", Db::Sqlite),
];

struct Options {
    rounds: usize,
    idle: Duration,
    only: Option<Vec<String>>,
    scenarios: Vec<Scenario>,
    svg: PathBuf,
    /// Handlers in flight for every contender.
    concurrency: usize,
}

fn options() -> Result<Options, String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut o = Options {
        rounds: 3,
        idle: Duration::from_secs(60),
        only: None,
        scenarios: Scenario::DEFAULT.to_vec(),
        svg: manifest.join("../docs/peers-precision.svg"),
        concurrency: harness::CONCURRENCY,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--rounds" => o.rounds = value()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            "--idle-secs" => {
                o.idle =
                    Duration::from_secs(value()?.parse().map_err(|e| format!("--idle-secs: {e}"))?)
            }
            "--only" => o.only = Some(value()?.split(',').map(str::to_owned).collect()),
            "--scenarios" => {
                let v = value()?;
                o.scenarios = v
                    .split(',')
                    .map(|s| {
                        Scenario::ALL
                            .into_iter()
                            .find(|k| k.name() == s)
                            .ok_or(format!("unknown scenario {s:?}"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--svg" => o.svg = PathBuf::from(value()?),
            "--concurrency" => {
                o.concurrency = value()?
                    .parse()
                    .map_err(|e| format!("--concurrency: {e}"))?
            }
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    if o.rounds == 0 {
        return Err("--rounds must be at least 1".into());
    }
    if o.concurrency == 0 {
        return Err("--concurrency must be at least 1".into());
    }
    Ok(o)
}

/// Builds both contender binaries into the runner's own target directory and
/// returns that directory's `release`.
fn build() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin_dir = exe
        .parent()
        .ok_or("no directory for the runner")?
        .to_path_buf();
    let target = bin_dir.parent().ok_or("no target directory")?;
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    for m in [manifest.join("Cargo.toml"), manifest.join("ttw/Cargo.toml")] {
        let mut cargo =
            std::process::Command::new(std::env::var("CARGO").unwrap_or("cargo".into()));
        // Without what `cargo run` set for this process: build scripts that
        // watch these would see them change between this build and the
        // next `cargo run`, and each would rebuild half the dependencies.
        for (key, _) in std::env::vars() {
            if key.starts_with("CARGO_PKG_")
                || key.starts_with("CARGO_MANIFEST_")
                || [
                    "CARGO_CRATE_NAME",
                    "CARGO_BIN_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                ]
                .contains(&key.as_str())
            {
                cargo.env_remove(key);
            }
        }
        if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
            let kept: Vec<PathBuf> = std::env::split_paths(&paths)
                .filter(|p| !p.starts_with(target))
                .collect();
            cargo.env(
                "LD_LIBRARY_PATH",
                std::env::join_paths(kept).map_err(|e| e.to_string())?,
            );
        }
        let status = cargo
            // apalis-postgres checks its SQL against DATABASE_URL at
            // compile time when it is set; offline it uses what it ships.
            .env("SQLX_OFFLINE", "true")
            .args(["build", "--release", "--bins", "--manifest-path"])
            .arg(&m)
            .arg("--target-dir")
            .arg(target)
            .status()
            .map_err(|e| format!("cargo: {e}"))?;
        if !status.success() {
            return Err(format!("building {} failed", m.display()));
        }
    }
    Ok(bin_dir)
}

/// A fresh place for one run.
struct Place {
    db: Db,
    name: String,
    url: Option<String>,
    dir: PathBuf,
}

struct Server {
    admin: sqlx::PgPool,
    url: String,
    statements: bool,
}

impl Server {
    async fn connect(url: &str) -> Result<Server, String> {
        let admin = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect(url)
            .await
            .map_err(|e| format!("PostgreSQL at DATABASE_URL: {e}"))?;
        let statements = sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .execute(&admin)
            .await
            .is_ok()
            && sqlx::query("SELECT count(*) FROM pg_stat_statements")
                .execute(&admin)
                .await
                .is_ok();
        Ok(Server {
            admin,
            url: url.to_owned(),
            statements,
        })
    }

    fn url_for(&self, database: &str) -> String {
        let (base, query) = match self.url.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (self.url.as_str(), None),
        };
        let root = base.rsplit_once('/').map_or(base, |(r, _)| r);
        match query {
            Some(q) => format!("{root}/{database}?{q}"),
            None => format!("{root}/{database}"),
        }
    }
}

async fn make_place(server: Option<&Server>, db: Db, name: String) -> Result<Place, String> {
    let dir = std::env::temp_dir()
        .join(format!("ttw-peers-{}", std::process::id()))
        .join(&name);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let url = match db {
        Db::Sqlite => None,
        Db::Postgres => {
            let server = server.ok_or("no PostgreSQL")?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .execute(&server.admin)
            .await
            .map_err(|e| e.to_string())?;
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&server.admin)
                .await
                .map_err(|e| format!("create database {name}: {e}"))?;
            Some(server.url_for(&name))
        }
    };
    Ok(Place { db, name, url, dir })
}

async fn drop_place(server: Option<&Server>, place: Place) {
    let _ = std::fs::remove_dir_all(&place.dir);
    if let (Db::Postgres, Some(server)) = (place.db, server) {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            place.name
        )))
        .execute(&server.admin)
        .await;
    }
}

/// The handlers in flight every contender is told (`--concurrency`).
static CONCURRENCY: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

fn command(bin_dir: &Path, c: &Contender, scenario: Scenario, place: &Place) -> Command {
    let mut cmd = Command::new(bin_dir.join(c.binary));
    cmd.arg(c.name).arg(scenario.name());
    // The scenario sizes reach the contender from this process's
    // environment (harness.rs).
    let concurrency = CONCURRENCY.get().copied().unwrap_or(harness::CONCURRENCY);
    cmd.env("PEERS_CONCURRENCY", concurrency.to_string());
    match &place.url {
        Some(url) => cmd.arg("--postgres").arg(url),
        None => cmd.arg("--sqlite").arg(&place.dir),
    };
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    cmd
}

/// What one run printed, `key value` per line.
type Printed = BTreeMap<String, String>;

fn parse(out: &str) -> Printed {
    out.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

async fn run_one(
    bin_dir: &Path,
    c: &Contender,
    scenario: Scenario,
    place: &Place,
) -> Result<Printed, String> {
    let child = command(bin_dir, c, scenario, place)
        .spawn()
        .map_err(|e| format!("{}: {e}", c.binary))?;
    let out = tokio::time::timeout(Duration::from_secs(480), child.wait_with_output())
        .await
        .map_err(|_| "no result within 480 s".to_string())?
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("exited with {}", out.status));
    }
    Ok(parse(&String::from_utf8_lossy(&out.stdout)))
}

fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn clock_ticks_per_s() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

async fn statements(server: &Server, database: &str) -> Option<i64> {
    if !server.statements {
        return None;
    }
    sqlx::query_scalar(
        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements s \
         JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1",
    )
    .bind(database)
    .fetch_one(&server.admin)
    .await
    .ok()
}

/// Scenario 3 for all contenders at once: they are idle, so they hardly
/// disturb each other, and each has its own process and database.
async fn idle_round(
    bin_dir: &Path,
    server: Option<&Server>,
    contenders: &[Contender],
    round: usize,
    idle: Duration,
    results: &mut Results,
) -> Result<(), String> {
    let mut running = Vec::new();
    for c in contenders {
        let place = make_place(server, c.db, format!("peers_{}_idle_{round}", c.key())).await?;
        let mut child = command(bin_dir, c, Scenario::Idle, &place)
            .spawn()
            .map_err(|e| format!("{}: {e}", c.binary))?;
        let stdout = child.stdout.take().expect("piped");
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(Duration::from_secs(120), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line == "ready" {
                    return true;
                }
            }
            false
        })
        .await
        .unwrap_or(false);
        if !ready {
            return Err(format!("{}: not ready for the idle scenario", c.label()));
        }
        running.push((c, place, child));
    }
    // Let start-up work settle before counting.
    tokio::time::sleep(Duration::from_secs(2)).await;
    if let Some(server) = server.filter(|s| s.statements) {
        let _ = sqlx::query("SELECT pg_stat_statements_reset()")
            .execute(&server.admin)
            .await;
    }
    let before: Vec<Option<u64>> = running
        .iter()
        .map(|(_, _, child)| child.id().and_then(cpu_ticks))
        .collect();
    tokio::time::sleep(idle).await;
    let per_s = clock_ticks_per_s();
    let minutes = idle.as_secs_f64() / 60.0;
    for ((c, place, mut child), before) in running.into_iter().zip(before) {
        let after = child.id().and_then(cpu_ticks);
        let cpu_ms = match (before, after) {
            (Some(b), Some(a)) => Some((a - b) as f64 / per_s * 1e3 / minutes),
            _ => None,
        };
        let stmts = match (c.db, server) {
            (Db::Postgres, Some(s)) => statements(s, &place.name).await.map(|n| n as f64 / minutes),
            _ => None,
        };
        let _ = child.kill().await;
        drop_place(server, place).await;
        let r = results.entry(c.key()).or_default();
        if let Some(v) = cpu_ms {
            r.idle_cpu_ms.push(v);
        }
        if let Some(v) = stmts {
            r.idle_statements.push(v);
        }
        println!(
            "  round {round} idle       {:<40} cpu {:>8} ms/min, statements {:>8}/min",
            c.label(),
            cpu_ms.map_or("-".into(), |v| format!("{v:.0}")),
            stmts.map_or("-".into(), |v| format!("{v:.0}")),
        );
    }
    Ok(())
}

async fn run() -> Result<(), String> {
    let o = options()?;
    // Every contender process reads it (`harness::concurrency`).
    let _ = CONCURRENCY.set(o.concurrency);
    let bin_dir = build()?;
    let server = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(Server::connect(&url).await?),
        _ => {
            println!("PostgreSQL contenders skipped: DATABASE_URL is not set");
            None
        }
    };
    if let Some(s) = &server {
        if !s.statements {
            println!(
                "idle statements not counted: pg_stat_statements is not loaded \
                 (shared_preload_libraries; scripts/postgres.sh loads it)"
            );
        }
    }
    let contenders: Vec<Contender> = CONTENDERS
        .iter()
        .filter(|(_, _, db)| *db == Db::Sqlite || server.is_some())
        .filter(|(name, _, _)| {
            o.only
                .as_ref()
                .is_none_or(|only| only.iter().any(|x| x == name))
        })
        .map(|&(name, binary, db)| Contender { name, binary, db })
        .collect();
    println!(
        "{} contenders, {} rounds, {} handlers in flight each, {} cores shared with the database",
        contenders.len(),
        o.rounds,
        o.concurrency,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut results = Results::new();
    for round in 1..=o.rounds {
        for &scenario in &o.scenarios {
            if scenario == Scenario::Idle {
                idle_round(
                    &bin_dir,
                    server.as_ref(),
                    &contenders,
                    round,
                    o.idle,
                    &mut results,
                )
                .await?;
                continue;
            }
            // A different contender goes first in each round.
            let k = contenders.len();
            for i in 0..k {
                let c = &contenders[(i + round - 1) % k];
                let name = format!("peers_{}_{}_{round}", c.key(), scenario.name());
                let place = make_place(server.as_ref(), c.db, name).await?;
                let outcome = run_one(&bin_dir, c, scenario, &place).await;
                drop_place(server.as_ref(), place).await;
                let m = results.entry(c.key()).or_default();
                let summary = match outcome {
                    Ok(p) => record(m, scenario, &p),
                    Err(e) => {
                        m.failures
                            .push(format!("{} round {round}: {e}", scenario.name()));
                        format!("FAILED: {e}")
                    }
                };
                println!(
                    "  round {round} {:<10} {:<40} {summary}",
                    scenario.name(),
                    c.label()
                );
            }
        }
    }
    table(&contenders, &mut results, &o.scenarios);
    if o.scenarios.contains(&Scenario::Precision) {
        plot(&o.svg, &contenders, &results)?;
        println!("\nprecision CDF written to {}", o.svg.display());
    }
    let _ = std::fs::remove_dir_all(
        std::env::temp_dir().join(format!("ttw-peers-{}", std::process::id())),
    );
    Ok(())
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
