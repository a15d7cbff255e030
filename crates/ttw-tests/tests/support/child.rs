//! The processes the tests start and kill (`src/bin/ttw-child.rs`: a
//! library scheduler, a node whose handler hangs, ...), each a role of one
//! binary.

#![allow(dead_code)]

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// What a child prints once it runs.
pub const STARTED: &str = "STARTED";

/// The child binary in role `role` with `args` (`--name value` pairs),
/// its standard output piped, killed when dropped; not started yet.
pub fn command(role: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ttw-child"));
    command
        .arg(role)
        .args(args)
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Starts the child in role `role` with `args`; returns once it printed
/// [`STARTED`], its later output read and dropped.
pub async fn start(role: &str, args: &[&str]) -> Child {
    let mut child = command(role, args).spawn().expect("the child starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while let Some(line) = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the child says it started")
        .unwrap()
    {
        if line.starts_with(STARTED) {
            break;
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    child
}
