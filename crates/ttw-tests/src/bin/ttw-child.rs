//! The processes the tests start, kill and restart, one role each, named by
//! the first argument; the rest are `--name value` pairs. Each prints
//! `STARTED` once it runs, then runs until it is killed.
//!
//! - `crash-node --ttl-ms MS [--node-id ID]` (`tests/crash.rs`): a node on
//!   the parent's database whose handler prints `RUNNING <id>` and hangs.
//! - `hooks --sqlite PATH | --postgres URL --hook URL --secret S [--node-id
//!   ID]` (`tests/restart.rs`, `tests/failover.rs`): the library's
//!   scheduler at its default settings delivering queue `hooks` by webhook.
//! - `disk-log --sqlite PATH --log PATH` (`tests/disk_full.rs`): a
//!   scheduler that appends each delivery to the log (`number attempt
//!   ran_ms due_ms`).
//! - `nats-publisher --nats URL` (`tests/jetstream.rs`): a node on the
//!   parent's database that publishes queue `events` to JetStream, prints
//!   `PUBLISHED <id>` and hangs before its outcome is written.
//!
//! The parent's database (`crash-node`, `nats-publisher`) is described by
//! `TTW_TEST_SQLITE`, or `TTW_TEST_POSTGRES` and `TTW_TEST_SCHEMA`.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use ttw_durable::{Failure, JetStream, Scheduler, Store, Target, Webhook};

/// Longer than any test runs: a lock or lease this long never runs out.
const NEVER: Duration = Duration::from_secs(3600);

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(role) = args.next() else {
        eprintln!("ttw-child: name a role: crash-node, hooks, disk-log, nats-publisher");
        return ExitCode::from(2);
    };
    let rest: Vec<String> = args.collect();
    let options: HashMap<&str, &str> = rest
        .chunks(2)
        .filter_map(|pair| Some((pair.first()?.strip_prefix("--")?, pair.get(1)?.as_str())))
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let ran = runtime.block_on(async {
        match role.as_str() {
            "crash-node" => crash_node(&options).await,
            "hooks" => hooks(&options).await,
            "disk-log" => disk_log(&options).await,
            "nats-publisher" => nats_publisher(&options).await,
            other => Err(format!("unknown role {other:?}")),
        }
    });
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("ttw-child {role}: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The option `name`, or an error naming it.
fn option<'a>(options: &HashMap<&str, &'a str>, name: &str) -> Result<&'a str, String> {
    options
        .get(name)
        .copied()
        .ok_or_else(|| format!("--{name} is missing"))
}

/// The database a parent test described in the environment.
async fn parent_store() -> Result<Store, String> {
    let builder = Store::builder().connect_timeout(Duration::from_secs(20));
    let store = if let Ok(path) = std::env::var("TTW_TEST_SQLITE") {
        builder.sqlite(path).await
    } else {
        let url =
            std::env::var("TTW_TEST_POSTGRES").map_err(|_| "no database in the environment")?;
        let schema = std::env::var("TTW_TEST_SCHEMA").map_err(|_| "TTW_TEST_SCHEMA is missing")?;
        builder.postgres_schema(schema).postgres(&url).await
    };
    store.map_err(|err| err.to_string())
}

/// Says it started, and runs until killed.
async fn started() -> Result<(), String> {
    println!("STARTED");
    std::future::pending::<()>().await;
    Ok(())
}

async fn crash_node(options: &HashMap<&str, &str>) -> Result<(), String> {
    let store = parent_store().await?;
    let ttl = Duration::from_millis(option(options, "ttl-ms")?.parse().map_err(|_| "--ttl-ms")?);
    let mut builder = Scheduler::builder(store)
        .callback_timeout(NEVER)
        .lease_ttl(ttl)
        .heartbeat(Duration::from_millis(200).min(ttl / 2));
    if let Some(id) = options.get("node-id") {
        builder = builder.node_id(*id);
    }
    let _scheduler = builder
        .start(|task| async move {
            println!("RUNNING {}", task.id().get());
            // Hangs until the process is killed.
            std::future::pending::<()>().await;
            Ok::<_, String>(())
        })
        .await
        .map_err(|err| err.to_string())?;
    started().await
}

async fn hooks(options: &HashMap<&str, &str>) -> Result<(), String> {
    let store = match (options.get("sqlite"), options.get("postgres")) {
        (Some(path), _) => Store::sqlite(*path).await,
        (None, Some(url)) => Store::postgres(url).await,
        (None, None) => return Err("give --sqlite PATH or --postgres URL".into()),
    }
    .map_err(|err| err.to_string())?;
    let mut builder = Scheduler::builder(store);
    if let Some(id) = options.get("node-id") {
        builder = builder.node_id(*id);
    }
    let webhook = Webhook::builder(option(options, "hook")?)
        .secret(option(options, "secret")?)
        .build()
        .map_err(|err| err.to_string())?;
    let _scheduler = builder
        .deliver("hooks", webhook)
        .start_queues()
        .await
        .map_err(|err| err.to_string())?;
    started().await
}

fn millis(t: SystemTime) -> u128 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}

async fn disk_log(options: &HashMap<&str, &str>) -> Result<(), String> {
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(std::io::stderr)
        .try_init();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(option(options, "log")?)
        .map_err(|err| err.to_string())?;
    let log = Arc::new(Mutex::new(log));
    let store = Store::sqlite(option(options, "sqlite")?)
        .await
        .map_err(|err| err.to_string())?;
    let _scheduler = Scheduler::builder(store)
        .start(move |task| {
            let number = task
                .payload()
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u32::from_be_bytes);
            let line = format!(
                "{number} {} {} {}\n",
                task.attempt(),
                millis(SystemTime::now()),
                millis(task.run_at())
            );
            let written = log
                .lock()
                .map_err(|_| "the log's lock".to_string())
                .and_then(|mut log| log.write_all(line.as_bytes()).map_err(|e| e.to_string()));
            async move { written }
        })
        .await
        .map_err(|err| err.to_string())?;
    started().await
}

async fn nats_publisher(options: &HashMap<&str, &str>) -> Result<(), String> {
    let store = parent_store().await?;
    let client = async_nats::connect(option(options, "nats")?)
        .await
        .map_err(|err| err.to_string())?;
    let target = JetStream::builder(client)
        .subject("tasks.{queue}.{key}")
        .timeout(Duration::from_secs(1))
        .build()
        .map_err(|err| err.to_string())?;
    let _scheduler = Scheduler::builder(store)
        .node_id("publisher")
        .callback_timeout(NEVER)
        .handle("events", move |task| {
            let delivered = target.deliver(task.clone());
            async move {
                delivered.await?;
                println!("PUBLISHED {}", task.id().get());
                std::future::pending::<()>().await;
                Ok::<_, Failure>(())
            }
        })
        .start_queues()
        .await
        .map_err(|err| err.to_string())?;
    started().await
}
