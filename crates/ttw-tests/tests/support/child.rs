//! This test binary started again as a child process that runs one
//! `#[ignore]`d test alone (a library scheduler the test kills, say), with
//! the environment that tells it what to do.

#![allow(dead_code)]

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use ttw_durable::{SchedulerBuilder, Webhook};

/// What a child prints once it is ready.
pub const READY: &str = "ttw server: listening on";

/// What a child runs as a library scheduler: `builder`'s scheduler
/// delivering queue `hooks` by webhook to `hook`, signed with `secret`.
/// Says it is ready, and never returns.
pub async fn deliver_hooks(builder: SchedulerBuilder, hook: &str, secret: &str) {
    let webhook = Webhook::builder(hook).secret(secret).build().unwrap();
    let _scheduler = builder
        .deliver("hooks", webhook)
        .start_queues()
        .await
        .expect("the child's scheduler starts");
    println!("{READY} (a library scheduler)");
    std::future::pending::<()>().await;
}

/// Starts the ignored test `test` of this binary alone with `env`, killed
/// when dropped; returns once it printed a line starting with [`READY`],
/// its later output read and dropped.
pub async fn start(test: &str, env: &[(&str, &std::ffi::OsStr)]) -> Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([test, "--exact", "--ignored", "--nocapture"])
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("the child starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while let Some(line) = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the child says it started")
        .unwrap()
    {
        if line.starts_with(READY) {
            break;
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    child
}
