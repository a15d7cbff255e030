//! A real `nats-server` with JetStream on (`-js`), its store in a temporary
//! directory: started on a free loopback port, stopped with `SIGKILL`, and
//! started again on the same port and store.
//!
//! Without `nats-server` on the machine the tests that need it are
//! `#[ignore]`d (`build.rs` sets `ttw_no_nats`), except under `CI`, where
//! `.ci/run` installs it and a missing one must fail.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

/// A running (or stopped) `nats-server`.
pub struct Nats {
    child: Option<Child>,
    pub port: u16,
    store: PathBuf,
}

impl Nats {
    /// A server on a free port with a fresh store.
    pub async fn start() -> Nats {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let store = std::env::temp_dir().join(format!("ttw-nats-{}-{port}", std::process::id()));
        let mut nats = Nats {
            child: None,
            port,
            store,
        };
        nats.resume().await;
        nats
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// `SIGKILL`, and reaped.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().await.expect("SIGKILL nats-server");
        }
    }

    /// Started again on the same port and store; returns once it takes
    /// connections.
    pub async fn resume(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = Command::new("nats-server")
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(&self.store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("nats-server starts (installed from the system packages)");
        self.child = Some(child);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .is_err()
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "nats-server did not listen within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A client of it that reconnects forever.
    pub async fn client(&self) -> async_nats::Client {
        async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connect(self.url())
            .await
            .expect("connect to nats-server")
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.store);
    }
}
