//! `ttw serve`: the dashboard page, the JSON it reads, the two actions it
//! takes (redrive, cancel: both need the token), and `/metrics` for
//! Prometheus.
//!
//! The page is static; its script fetches `/api/overview` and builds every
//! cell with `textContent`, so nothing from a payload or an error is ever
//! parsed as HTML. The Content-Security-Policy allows scripts from this
//! server's own files only: an inline `<script>` could not run even if one
//! slipped through.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde_json::{json, Value};
use ttw_durable::{Store, TaskId, TaskQuery, TaskState};

use crate::cli::ServeArgs;
use crate::error::{fail, Failure, Result};
use crate::output;
use crate::parse::flag_duration as parse_duration;

const PAGE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("page.js");

/// How many lateness samples the page's chart keeps (one per refresh).
const LATENESS_SAMPLES: usize = 120;

/// The dead tasks and the due-soon tasks the page lists, at most.
const LISTED: u32 = 50;

struct App {
    store: Store,
    token: String,
    metrics: PrometheusHandle,
    /// (sampled at, the oldest due task's lateness over all queues, ms).
    lateness: Mutex<VecDeque<(SystemTime, u64)>>,
}

type Shared = Arc<App>;

pub(crate) async fn serve(store: Store, args: ServeArgs) -> Result<()> {
    let refresh = parse_duration("--refresh", &args.refresh)?;
    if refresh < Duration::from_millis(100) {
        return fail("--refresh: at least 100ms");
    }
    let token = match args.token {
        Some(token) if token.len() < 8 => return fail("--token: at least 8 characters"),
        Some(token) => token,
        None => new_token()?,
    };
    let router = dashboard(store, token.clone(), refresh)?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|err| Failure(format!("cannot listen on {}: {err}", args.listen)))?;
    let addr = listener.local_addr()?;
    println!("ttw: dashboard at http://{addr}/ (metrics at /metrics)");
    println!("ttw: token for redrive and cancel: {token}");
    if !addr.ip().is_loopback() {
        println!("ttw: listening beyond loopback: anyone who can reach {addr} can read the tasks");
    }
    axum::serve(listener, router)
        .with_graceful_shutdown(stopped())
        .await?;
    Ok(())
}

/// The dashboard and `/metrics` on `store`: installs this process's
/// Prometheus recorder (do it before a scheduler starts, so that its
/// metrics are recorded), and refreshes the task counts every `refresh`.
/// Its redrive and cancel need `token`.
pub(crate) fn dashboard(store: Store, token: String, refresh: Duration) -> Result<Router> {
    let metrics = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|err| Failure(format!("cannot install the metrics recorder: {err}")))?;
    ttw_durable::describe_metrics();
    let app = Arc::new(App {
        store,
        token,
        metrics,
        lateness: Mutex::new(VecDeque::new()),
    });
    tokio::spawn(refresher(app.clone(), refresh));
    Ok(Router::new()
        .route("/", get(page))
        .route("/app.js", get(script))
        .route("/api/overview", get(overview))
        .route("/api/tasks/{id}/redrive", post(redrive))
        .route("/api/tasks/{id}/cancel", post(cancel))
        .route("/metrics", get(metrics_text))
        .with_state(app))
}

/// 128 random bits, as hex.
pub(crate) fn new_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|err| Failure(format!("cannot make a token: {err}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Resolves on Ctrl-C or SIGTERM.
async fn stopped() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// Every `every`: the task counts into the `ttw_tasks` gauge, a lateness
/// sample for the page, and the exporter's upkeep.
async fn refresher(app: Shared, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(err) = app.store.publish_task_counts().await {
            eprintln!("ttw: reading the task counts failed: {err}");
        }
        if let Ok(oldest) = app.store.oldest_due().await {
            let late = oldest
                .values()
                .map(|t| output::ago(*t).as_millis() as u64)
                .max()
                .unwrap_or(0);
            let mut samples = app.lateness.lock().unwrap_or_else(|e| e.into_inner());
            samples.push_back((SystemTime::now(), late));
            while samples.len() > LATENESS_SAMPLES {
                samples.pop_front();
            }
        }
        app.metrics.run_upkeep();
    }
}

/// A response with the security headers every answer carries.
fn secured(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn page() -> Response {
    secured(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE).into_response())
}

async fn script() -> Response {
    secured(
        (
            [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
            SCRIPT,
        )
            .into_response(),
    )
}

async fn metrics_text(State(app): State<Shared>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
        .into_response()
}

/// A JSON error with `status`.
fn error(status: StatusCode, message: impl Into<String>) -> Response {
    secured((status, Json(json!({ "error": message.into() }))).into_response())
}

/// Everything the page shows, read now.
async fn overview(State(app): State<Shared>) -> Response {
    match read_overview(&app).await {
        Ok(value) => secured(Json(value).into_response()),
        Err(Failure(message)) => error(StatusCode::SERVICE_UNAVAILABLE, message),
    }
}

async fn read_overview(app: &App) -> Result<Value> {
    let store = &app.store;
    let counts = store.queue_counts().await?;
    let oldest = store.oldest_due().await?;
    let timeline = store.due_timeline(Duration::from_secs(60), 60).await?;
    let dead = store
        .list(&TaskQuery::new().state(TaskState::Dead).limit(LISTED))
        .await?;
    let now = SystemTime::now();
    let soon = store
        .list(
            &TaskQuery::new()
                .state(TaskState::Scheduled)
                .due_before(now + Duration::from_secs(3600))
                .limit(LISTED),
        )
        .await?;
    let nodes = store.nodes().await?;
    // Every queue with tasks or settings, with its flow control.
    let settings: std::collections::BTreeMap<String, ttw_durable::QueueSettings> = store
        .all_queue_settings()
        .await?
        .into_iter()
        .map(|s| (s.queue.clone(), s))
        .collect();
    let mut names: Vec<&String> = counts.keys().chain(settings.keys()).collect();
    names.sort();
    names.dedup();
    let queues: Vec<Value> = names
        .into_iter()
        .map(|q| {
            let mut v = output::counts_json(&counts.get(q).copied().unwrap_or_default());
            v["queue"] = json!(q);
            v["late_ms"] = json!(oldest.get(q).map(|t| output::ago(*t).as_millis() as u64));
            v["flow"] = json!(settings
                .get(q)
                .map_or_else(|| "-".to_string(), output::flow_text));
            v
        })
        .collect();
    let lateness: Vec<Value> = app
        .lateness
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(at, ms)| json!({ "at": output::time(*at), "late_ms": ms }))
        .collect();
    Ok(json!({
        "now": output::time(now),
        "backend": if store.is_postgres() { "PostgreSQL" } else { "SQLite" },
        "queues": queues,
        "timeline": { "overdue": timeline.overdue, "bucket_s": 60, "counts": timeline.counts },
        "lateness": lateness,
        "dead": dead.iter().map(output::task_json).collect::<Vec<_>>(),
        "soon": soon.iter().map(output::task_json).collect::<Vec<_>>(),
        "nodes": nodes.iter().map(|n| json!({
            "node_id": n.node_id,
            "queues": n.queues,
            "heartbeat_ago_ms": output::ago(n.heartbeat_at).as_millis() as u64,
            "leaving": n.leaving,
            "leases": n.leases,
            "lease_expires_in_ms": n.lease_expires_at.map(|t| output::until(t).as_millis() as u64),
            "live": n.live,
        })).collect::<Vec<_>>(),
    }))
}

/// Whether the request carries the token (`Authorization: Bearer TOKEN`),
/// compared in constant time: `None` if it does, the refusal if not.
fn refusal(app: &App, headers: &HeaderMap) -> Option<Response> {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if given.is_empty() {
        return Some(error(
            StatusCode::UNAUTHORIZED,
            "refused: this action needs the token printed by `ttw serve`",
        ));
    }
    let same = given.len() == app.token.len()
        && given
            .bytes()
            .zip(app.token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    (!same).then(|| error(StatusCode::FORBIDDEN, "refused: wrong token"))
}

async fn redrive(State(app): State<Shared>, Path(id): Path<i64>, headers: HeaderMap) -> Response {
    if let Some(refused) = refusal(&app, &headers) {
        return refused;
    }
    match app.store.redrive(TaskId::new(id)).await {
        Ok(true) => secured(Json(json!({ "id": id, "redriven": true })).into_response()),
        Ok(false) => error(StatusCode::CONFLICT, format!("task {id} is not dead")),
        Err(err) => error(StatusCode::SERVICE_UNAVAILABLE, err.to_string()),
    }
}

async fn cancel(State(app): State<Shared>, Path(id): Path<i64>, headers: HeaderMap) -> Response {
    if let Some(refused) = refusal(&app, &headers) {
        return refused;
    }
    match app.store.cancel(TaskId::new(id)).await {
        Ok(true) => secured(Json(json!({ "id": id, "cancelled": true })).into_response()),
        Ok(false) => error(StatusCode::CONFLICT, format!("task {id} is not scheduled")),
        Err(err) => error(StatusCode::SERVICE_UNAVAILABLE, err.to_string()),
    }
}
