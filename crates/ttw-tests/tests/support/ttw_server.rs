//! `ttw server` as a child process: started on a configuration file with
//! the environment it names, and handed back once it says where it
//! listens, with its later output or with that output read and dropped.

#![allow(dead_code)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// The output of a `ttw server` child, line by line.
pub type Output = Lines<BufReader<ChildStdout>>;

/// Writes `dir/ttw.toml`: listening on a free port of loopback, on the
/// database of `database` (its `database` and `schema` lines), with
/// `rest` (queues, tokens, sections) after it. Returns its path.
pub fn write_config(dir: &Path, database: &str, rest: &str) -> std::path::PathBuf {
    let path = dir.join("ttw.toml");
    std::fs::write(
        &path,
        format!("listen = \"127.0.0.1:0\"\n{database}\n\n{rest}"),
    )
    .expect("the configuration is written");
    path
}

/// Starts `ttw server --config config` with `env` (and no `DATABASE_URL`):
/// the process, killed when dropped, the address it listens on
/// (`host:port`), and the rest of its output, for a test that reads it.
pub async fn spawn(config: &Path, env: &[(&str, &str)]) -> (Child, String, Output) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ttw-under-test"));
    command
        .args(["server", "--config"])
        .arg(config)
        .env_remove("DATABASE_URL")
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("the server starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the server says where it listens")
        .unwrap()
        .expect("a line");
    let addr = first
        .strip_prefix("ttw server: listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .trim_end_matches('/')
        .to_string();
    (child, addr, lines)
}

/// As [`spawn`], its later output read and dropped.
pub async fn start(config: &Path, env: &[(&str, &str)]) -> (Child, String) {
    let (child, addr, mut lines) = spawn(config, env).await;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, addr)
}
