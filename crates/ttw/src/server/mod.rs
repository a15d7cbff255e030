//! `ttw server --config FILE`: the delayed-task service. One process runs
//! the HTTP API (any language schedules, reads, cancels and reschedules
//! tasks over HTTP; see [`api`]), and unless the file turns it off a
//! scheduler node that delivers each configured queue to its target (a
//! signed webhook, or NATS JetStream). On SQLite it is the one box; on
//! PostgreSQL any number of instances share the work, each a node fenced
//! as every node is, and each serving the API.
//!
//! TLS is left to a proxy in front (the API speaks plain HTTP/1.1): bind to
//! loopback or a private network. SIGTERM or Ctrl-C stops accepting
//! requests, lets the deliveries in flight finish within `shutdown_grace`,
//! and hands the node's leases over.

mod cluster;
pub(crate) mod config;
mod console;
mod extract;
mod handlers;
mod metrics;
mod refusal;
mod routes;
mod selection;
mod service;
mod traces;
pub(crate) mod wire;

use std::path::Path;
use std::sync::Arc;

use ttw_durable::{Scheduler, Store};

use crate::error::{Failure, Result};
use config::{Settings, TargetSettings};

/// The API's OpenAPI document, as `GET /v1/openapi.json` serves it.
pub(crate) fn openapi() -> &'static str {
    routes::document_json()
}

/// Checks the file and says what it holds, or runs the service until
/// SIGTERM or Ctrl-C.
pub(crate) async fn server(path: &Path, check: bool) -> Result<()> {
    let settings = config::load(path, |var| std::env::var(var).ok())?;
    if check {
        let targets = settings
            .queues
            .iter()
            .filter(|q| q.target.is_some())
            .count();
        println!(
            "ttw server: {} is valid: {} queue(s), {targets} with a target, {} token(s), scheduler {}",
            path.display(),
            settings.queues.len(),
            settings.tokens.len(),
            if settings.scheduler { "on" } else { "off" }
        );
        return Ok(());
    }
    // Warnings (a failing database, a refused delivery) on standard error;
    // spans by OTLP when built and asked for. Flushed when the server ends.
    let _traces = traces::init()?;
    run(settings, None, stopped()).await
}

/// Runs the service on `settings` until `stop` resolves (then as at
/// SIGTERM: no more requests, deliveries in flight finish within
/// `shutdown_grace`, the node's leases handed over); `bound` is told the
/// address it listens on.
pub(crate) async fn run(
    settings: Settings,
    bound: Option<tokio::sync::oneshot::Sender<std::net::SocketAddr>>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let store = crate::store::open(
        &settings.database,
        settings.schema.as_deref(),
        true,
        settings.sqlite_commits,
    )
    .await?;
    // Before the scheduler starts, so that the node's metrics are recorded.
    let metrics = metrics::install()?;
    let scheduler = start_scheduler(&store, &settings).await?;
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(|err| Failure(format!("cannot listen on {}: {err}", settings.listen)))?;
    let addr = listener.local_addr()?;
    let grace = settings.shutdown_grace;
    let max_body = settings.max_body_bytes;
    let grouped = store.grouped();
    let stats = cluster::Stats::new(settings.stats_every, scheduler.as_ref());
    let console = settings.console;
    let api = Arc::new(service::Api {
        store,
        settings,
        grouped,
        stats,
        counts: Arc::default(),
    });
    let mut router =
        metrics::routes(api.clone(), metrics.clone()).merge(routes::routes(api.clone()));
    let refresher = tokio::spawn(metrics::refresh(metrics));
    if console {
        router = console::routes().merge(router);
    }
    let router = router.layer(axum::extract::DefaultBodyLimit::max(max_body));
    println!("ttw server: listening on http://{addr}");
    if console {
        println!("ttw server: console on http://{addr}/console/");
    }
    println!("ttw server: metrics on http://{addr}/metrics (a token of scope read)");
    if let Some(bound) = bound {
        let _ = bound.send(addr);
    }
    // At the stop, the claims waiting on pull queues answer empty at once
    // (their workers claim elsewhere), so that the graceful shutdown does
    // not wait out their long polls.
    let pulls = api.store.pulls();
    let stop = async move {
        stop.await;
        pulls.stop_waiting();
    };
    let serve = axum::serve(listener, router).with_graceful_shutdown(stop);
    tokio::select! {
        served = serve => served.map_err(|err| Failure(format!("the server stopped: {err}")))?,
        () = api.stats.sample(scheduler.as_ref()) => {}
    }
    if let Some(scheduler) = scheduler {
        match tokio::time::timeout(grace, scheduler.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                return Err(Failure(format!(
                    "the scheduler stopped with an error: {err}"
                )))
            }
            Err(_) => {
                eprintln!(
                    "ttw server: deliveries still running after {grace:?}; their tasks are delivered again once their locks run out"
                );
            }
        }
    }
    refresher.abort();
    println!("ttw server: stopped");
    Ok(())
}

/// The node, delivering each queue that has a target; `None` when the file
/// turns the scheduler off or no queue has a target.
async fn start_scheduler(store: &Store, settings: &Settings) -> Result<Option<Scheduler>> {
    if !settings.scheduler || settings.queues.iter().all(|q| q.target.is_none()) {
        return Ok(None);
    }
    let mut builder = Scheduler::builder(store.clone());
    if let Some(n) = settings.max_concurrency {
        builder = builder.max_concurrency(n);
    }
    let node = &settings.node;
    if let Some(id) = &node.node_id {
        builder = builder.node_id(id.clone());
    }
    if let Some(d) = node.heartbeat {
        builder = builder.heartbeat(d);
    }
    if let Some(d) = node.lease_ttl {
        builder = builder.lease_ttl(d);
    }
    if let Some(d) = node.callback_timeout {
        builder = builder.callback_timeout(d);
    }
    if let Some(d) = node.lock_grace {
        builder = builder.lock_grace(d);
    }
    for queue in &settings.queues {
        match &queue.target {
            None => {}
            Some(TargetSettings::Webhook {
                url,
                secret,
                timeout,
                max_in_flight,
            }) => {
                let mut webhook = ttw_durable::Webhook::builder(url.clone());
                if let Some(secret) = secret {
                    webhook = webhook.secret(secret.clone());
                }
                if let Some(timeout) = timeout {
                    webhook = webhook.timeout(*timeout);
                }
                if let Some(n) = max_in_flight {
                    webhook = webhook.max_in_flight(*n);
                }
                // A task's own target goes out only under a prefix of a
                // token that may schedule to this queue (each schedule is
                // checked against its own token's; this is the last check).
                let prefixes: std::collections::BTreeSet<&String> = settings
                    .tokens
                    .iter()
                    .filter(|t| service::allow_queue(t, &queue.name).is_ok())
                    .flat_map(|t| &t.destinations)
                    .collect();
                webhook = webhook.allow_destinations(prefixes.into_iter().cloned());
                let webhook = webhook
                    .build()
                    .map_err(|err| Failure(format!("queue {:?}: {err}", queue.name)))?;
                builder = builder.deliver(queue.name.clone(), webhook);
            }
            Some(TargetSettings::Nats { url, subject }) => {
                let client = async_nats::connect(url.as_str()).await.map_err(|err| {
                    Failure(format!(
                        "queue {:?}: cannot reach NATS at {url}: {err}",
                        queue.name
                    ))
                })?;
                let mut stream = ttw_durable::JetStream::builder(client);
                if let Some(subject) = subject {
                    stream = stream.subject(subject.clone());
                }
                let stream = stream
                    .build()
                    .map_err(|err| Failure(format!("queue {:?}: {err}", queue.name)))?;
                builder = builder.deliver(queue.name.clone(), stream);
            }
            Some(TargetSettings::Pull) => builder = builder.pull(queue.name.clone()),
        }
    }
    let scheduler = builder
        .start_queues()
        .await
        .map_err(|err| Failure(format!("cannot start the scheduler: {err}")))?;
    Ok(Some(scheduler))
}

/// Resolves at SIGTERM or Ctrl-C.
async fn stopped() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    println!("ttw server: stopping");
}
