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
    /// Its name and routes, for a server of a cluster.
    cluster: Vec<String>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Nats {
    /// A server on a free port with a fresh store.
    pub async fn start() -> Nats {
        let port = free_port();
        let mut nats = Nats {
            child: None,
            port,
            store: Self::store_for(port),
            cluster: Vec::new(),
        };
        nats.resume().await;
        nats
    }

    fn store_for(port: u16) -> PathBuf {
        std::env::temp_dir().join(format!("ttw-nats-{}-{port}", std::process::id()))
    }

    /// Three servers routed to each other on loopback (cluster `ttw`,
    /// servers `n0`, `n1`, `n2`), JetStream on each: a stream created with
    /// 3 replicas keeps a copy on every one.
    pub async fn cluster() -> Vec<Nats> {
        // Six distinct ports: every listener is held until all are bound.
        let held: Vec<std::net::TcpListener> = (0..6)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let ports: Vec<u16> = held
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        drop(held);
        let (routes, clients) = ports.split_at(3);
        let mut servers = Vec::new();
        for (i, route) in routes.iter().enumerate() {
            let others: Vec<String> = routes
                .iter()
                .filter(|r| *r != route)
                .map(|r| format!("nats://127.0.0.1:{r}"))
                .collect();
            let port = clients[i];
            servers.push(Nats {
                child: None,
                port,
                store: Self::store_for(port),
                cluster: vec![
                    "--server_name".into(),
                    format!("n{i}"),
                    "--cluster_name".into(),
                    "ttw".into(),
                    "--cluster".into(),
                    format!("nats://127.0.0.1:{route}"),
                    "--routes".into(),
                    others.join(","),
                ],
            });
        }
        for server in &mut servers {
            server.resume().await;
        }
        servers
    }

    /// A client of every server of `servers` that reconnects forever.
    pub async fn cluster_client(servers: &[Nats]) -> async_nats::Client {
        let urls: Vec<async_nats::ServerAddr> =
            servers.iter().map(|s| s.url().parse().unwrap()).collect();
        async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connect(urls)
            .await
            .expect("connect to the cluster")
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
            .args(&self.cluster)
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
            if let Ok(Some(status)) = self.child.as_mut().unwrap().try_wait() {
                panic!(
                    "nats-server on port {} exited ({status}) before it listened",
                    self.port
                );
            }
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
