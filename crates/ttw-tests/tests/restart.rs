//! A process delivering by webhook (`ttw server`, or the library's
//! scheduler at its default settings), `SIGKILL`ed mid-stream and started
//! again on the same SQLite file: what the crash cut short is delivered
//! again, and nothing else is delivered twice.
#![cfg(target_os = "linux")]

#[path = "support/receiver.rs"]
mod receiver;

#[path = "support/ttw_server.rs"]
mod ttw_server;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use receiver::{Receiver, SECRET};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use ttw_durable::{NewTask, Scheduler, Store, Webhook};

const TOKEN: &str = "app-token-0123456789";
const TASKS: usize = 1_000;

fn config(dir: &Path, hook: &str, node_id: Option<&str>) -> PathBuf {
    let path = dir.join("ttw.toml");
    let node = node_id.map_or(String::new(), |id| format!("node_id = \"{id}\"\n"));
    std::fs::write(
        &path,
        format!(
            r#"listen = "127.0.0.1:0"
database = "{}"

[scheduler]
{node}
[[queues]]
name = "hooks"
webhook = {{ url = "{hook}", secret_env = "TTW_HOOK_SECRET" }}

[[tokens]]
name = "app"
secret_env = "TTW_TOKEN_APP"
scopes = ["schedule", "read"]
"#,
            dir.join("tasks.db").display()
        ),
    )
    .unwrap();
    path
}

/// The library's scheduler at its default settings, delivering queue
/// `hooks` by webhook, as a process of its own: this test binary started
/// again to run [`child_scheduler`] alone. Run on its own (no
/// `TTW_RESTART_CHILD`), it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the scheduler process the restart test starts and kills; does nothing on its own"]
async fn child_scheduler() {
    let (Some(path), Some(url)) = (
        std::env::var_os("TTW_RESTART_CHILD"),
        std::env::var_os("TTW_RESTART_HOOK"),
    ) else {
        return;
    };
    let store = Store::sqlite(path).await.unwrap();
    let webhook = Webhook::builder(url.to_str().unwrap())
        .secret(SECRET)
        .build()
        .unwrap();
    let _scheduler = Scheduler::builder(store)
        .deliver("hooks", webhook)
        .start_queues()
        .await
        .expect("the child's scheduler starts");
    println!("ttw server: listening on (a library scheduler)");
    std::future::pending::<()>().await;
}

/// The library's scheduler as a child process on the SQLite file `db`.
async fn library_scheduler(db: &Path, hook: &str) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["child_scheduler", "--exact", "--ignored", "--nocapture"])
        .env("TTW_RESTART_CHILD", db)
        .env("TTW_RESTART_HOOK", hook)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the child starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while let Some(line) = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the child says it started")
        .unwrap()
    {
        if line.starts_with("ttw server: listening on") {
            break;
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    child
}

/// `ttw server` as a child process, once it says where it listens.
async fn server(config: &Path) -> Child {
    ttw_server::start(
        config,
        &[("TTW_TOKEN_APP", TOKEN), ("TTW_HOOK_SECRET", SECRET)],
    )
    .await
    .0
}

/// Regression: a scheduler process SIGKILLed mid-stream (1,000 tasks, 20 or
/// so in flight) and started again on the same file delivered one task
/// twice after the restart, with two attempt numbers: a task claimed at the
/// kill whose request had not left yet. At least once allows a second
/// delivery only of a delivery the crash cut short, so after the restart
/// each task is delivered at most once.
async fn a_restart_delivers_nothing_twice(node_id: Option<&str>, library: bool) {
    let dir = std::env::temp_dir().join(format!(
        "ttw_restart_{}_{library}_{}",
        node_id.unwrap_or("random"),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let receiver = Receiver::start().await;
    let config = config(&dir, &receiver.url("/hook"), node_id);
    let store = Store::sqlite(dir.join("tasks.db")).await.unwrap();
    let ids: BTreeSet<i64> = store
        .schedule_batch((0..TASKS).map(|_| NewTask::new("sleep_ms=40").queue("hooks")))
        .await
        .unwrap()
        .iter()
        .map(|s| s.id().get())
        .collect();
    drop(store);

    let hook = receiver.url("/hook");
    let start = || async {
        if library {
            library_scheduler(&dir.join("tasks.db"), &hook).await
        } else {
            server(&config).await
        }
    };
    let mut first = start().await;
    receiver
        .wait_until(Duration::from_secs(60), |seen| seen.len() >= 320)
        .await;
    first.kill().await.expect("SIGKILL the server");
    // The receiver prints a request as it arrives: wait for the lines of the
    // last ones to be read.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = receiver.requests().len();

    let _second = start().await;
    receiver
        .wait_until(Duration::from_secs(120), |seen| {
            let tasks: BTreeSet<i64> = seen.iter().map(|r| r["task"].as_i64().unwrap()).collect();
            ids.is_subset(&tasks)
        })
        .await;
    // Any second delivery would come soon after the first.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let all = receiver.requests();
    let mut after: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for r in &all[before..] {
        after
            .entry(r["task"].as_i64().unwrap())
            .or_default()
            .push(r["attempt"].as_i64().unwrap());
    }
    let twice: Vec<_> = after.iter().filter(|(_, a)| a.len() > 1).collect();
    let again = all[..before]
        .iter()
        .filter(|r| after.contains_key(&r["task"].as_i64().unwrap()))
        .count();
    println!(
        "{before} requests before the kill, {} after; {again} tasks delivered again after the restart",
        all.len() - before
    );
    assert!(
        twice.is_empty(),
        "delivered twice after the restart (task: attempts): {twice:?}"
    );
    assert!(all.iter().all(|r| r["verified"] == true));
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_the_same_node_id_delivers_nothing_twice() {
    a_restart_delivers_nothing_twice(Some("ttw-restart"), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_a_new_node_id_delivers_nothing_twice() {
    a_restart_delivers_nothing_twice(None, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_scheduler_restarted_delivers_nothing_twice() {
    a_restart_delivers_nothing_twice(None, true).await;
}
